"""How a model family writes reasoning and tool calls in its raw output.

This is the contract between template analysis (which detects a family from a chat
template) and the streaming output parser (which recognises blocks in generated text).
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["Capabilities", "OutputFormat", "RenderedTurn", "ToolSyntax"]


class ToolSyntax(enum.Enum):
    """A tool-call syntax the output parser understands."""

    HERMES = "hermes"  # <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen)
    LLAMA3_JSON = "llama3_json"  # <|python_tag|>{...} or a bare JSON object (Llama 3.x)
    MISTRAL = "mistral"  # [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...}
    HARMONY = "harmony"  # gpt-oss: <|channel|>commentary to=functions.NAME ...<|message|>{...}


@attrs.frozen
class OutputFormat:
    """What to look for in one model's output.

    ``reasoning`` holds the (start, end) markers of a reasoning block, ``None`` when the
    family has none. ``tool_syntax`` is ``None`` when no syntax we parse applies.
    ``starts_in_thinking`` is true when the rendered prompt ends inside an open reasoning
    block, so generation begins as reasoning.
    """

    reasoning: tuple[str, str] | None = ("<think>", "</think>")
    tool_syntax: ToolSyntax | None = None
    starts_in_thinking: bool = False


@attrs.frozen
class Capabilities:
    """What a local model supports, derived from its chat template.

    ``reasoning``: it writes reasoning blocks. ``can_disable_thinking``: its template
    reads ``enable_thinking``. ``tools``: it has a tool syntax our parser understands.
    """

    reasoning: bool
    can_disable_thinking: bool
    tools: bool


@attrs.frozen
class RenderedTurn:
    """One rendering of a request through a chat template: the prompt ``text`` and the
    :class:`OutputFormat` of what the model will write after it."""

    text: str
    output_format: OutputFormat
