"""Which output conventions a chat template implies.

A GGUF model does not say how it writes reasoning or tool calls; its chat template
does, because the template renders past turns the way the model was trained to write
them. :func:`detect_family` reads the template source for the markers of the families
the output parser understands (see ``engine.formats``), and :func:`ends_in_reasoning`
tells whether a rendered generation prompt leaves a reasoning block open, in which case
generation starts in thinking.
"""

from __future__ import annotations

import attrs

from .formats import ToolSyntax

__all__ = ["REASONING_MARKERS", "Family", "detect_family", "ends_in_reasoning", "find_markers"]

# (start, end) of a reasoning block, most specific first: the first pair found wins.
REASONING_MARKERS: tuple[tuple[str, str], ...] = (
    ("<seed:think>", "</seed:think>"),  # ByteDance Seed-OSS
    ("<mm:think>", "</mm:think>"),  # MiniMax M3
    ("<|START_THINKING|>", "<|END_THINKING|>"),  # Command R7B, Cohere2MoE
    ("[THINK]", "[/THINK]"),  # Magistral, Ministral 3 reasoning
    ("<|channel|>analysis<|message|>", "<|end|>"),  # gpt-oss (harmony)
    ("<|channel>thought", "<channel|>"),  # Gemma 4
    ("<thinking>", "</thinking>"),  # Apriel 1.5
    ("<think>", "</think>"),  # DeepSeek R1, Qwen3, QwQ, GLM, Granite, SmolLM3, most others
)


@attrs.frozen
class Family:
    """A template's output conventions.

    ``name`` is for people (logs, docs, tests); ``reasoning`` is the (start, end) marker
    pair found in the template, ``None`` if none; ``tool_syntax`` is the tool-call
    syntax the output parser understands, ``None`` when the family uses another one.
    """

    name: str
    reasoning: tuple[str, str] | None
    tool_syntax: ToolSyntax | None


def _has(source: str, *markers: str) -> bool:
    return all(marker in source for marker in markers)


# (family name, test on the template source, tool syntax), first match wins. Families
# whose tool syntax the parser does not read come first so that their shared markers
# (``<tool_call>``, ``<|start_header_id|>``) do not claim them for another family.
_RULES: tuple[tuple[str, tuple[str, ...], ToolSyntax | None], ...] = (
    ("seed-oss", ("<seed:tool_call>",), None),
    ("minimax", ("<minimax:tool_call>",), None),
    ("minimax", ("]<]minimax[>[",), None),
    ("apriel", ("<tool_calls>",), None),  # a JSON list inside <tool_calls>
    ("qwen3-coder", ("<function=", "<parameter="), None),  # XML calls inside <tool_call>
    ("glm", ("<arg_key>",), None),  # GLM 4.5+: XML arguments inside <tool_call>
    ("functionary-v3.2", (">>>all",), None),
    ("functionary-v3.1", ("<|start_header_id|>", "<function="), None),
    ("firefunction", (" functools[",), None),
    ("deepseek-r1", ("<｜tool▁calls▁begin｜>",), None),
    ("command-r", ("<|START_ACTION|>",), None),
    ("gpt-oss", ("<|channel|>",), ToolSyntax.HARMONY),
    ("hermes", ("<tool_call>",), ToolSyntax.HERMES),
    ("llama3", ("<|start_header_id|>ipython<|end_header_id|>",), ToolSyntax.LLAMA3_JSON),
    ("llama3", ("<|python_tag|>",), ToolSyntax.LLAMA3_JSON),
    ("mistral", ("[TOOL_CALLS]",), ToolSyntax.MISTRAL),
    ("llama3", ("<|start_header_id|>",), None),
    ("chatml", ("<|im_start|>",), None),
)


def find_markers(text: str) -> tuple[str, str] | None:
    """The first known reasoning marker pair whose start marker occurs in ``text``, else
    the first whose end marker does, if that end marker is a closing tag (``</think>``:
    a template may only strip old reasoning; a bare ``<|end|>`` proves nothing).
    """
    for start, end in REASONING_MARKERS:
        if start in text:
            return (start, end)
    for start, end in REASONING_MARKERS:
        if end.startswith("</") and end in text:
            return (start, end)
    return None


def detect_family(source: str) -> Family:
    """The family of the chat template ``source``, from the markers it contains."""
    reasoning = find_markers(source)
    for name, markers, tool_syntax in _RULES:
        if _has(source, *markers):
            return Family(name, reasoning, tool_syntax)
    return Family("generic", reasoning, None)


def ends_in_reasoning(prompt: str, markers: tuple[str, str]) -> bool:
    """Whether ``prompt`` ends inside an open reasoning block.

    True when the last start marker comes after the last end marker, so whatever the
    model writes next is reasoning until it closes the block.
    """
    start, end = markers
    opened = prompt.rfind(start)
    return opened >= 0 and end not in prompt[opened + len(start) :]
