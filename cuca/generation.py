"""What a local generation hands to a turn's stages: its output format, its start and
its end.

The model's generation runs in a thread; the ``engine`` stage relays what it produces
to the ``output_parse`` stage. Between them travel plain records, declared here, on the
turn's own floor, so that the points table (:mod:`cuca.stages.points`) names them as the
types its stages read without importing the engine, and neither the model (which
produces them) nor the worker stages (which consume them) import each other: a
:class:`GenerationStart` first (made by the worker from the prepared turn, on the trio
side), then one ``str`` per generated token (possibly empty: half of a UTF-8 character,
a control token that is not part of the output format, or text held back by a
stop-sequence check), at most one :class:`Held`, then a :class:`GenerationEnd`.

:class:`OutputFormat` (how a model family writes reasoning and tool calls) is here with
them because the start names it; the engine re-exports all of these where they were
(``cuca.engine``, :mod:`cuca.engine.formats`, :mod:`cuca.engine.records`).
"""

from __future__ import annotations

import enum

import attrs

from .types import PromptCacheUsage, UnifiedRequest

__all__ = ["GenerationEnd", "GenerationStart", "Held", "OutputFormat", "ToolSyntax"]


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
class GenerationStart:
    """Sent before the first token: how to parse the output of this turn, and the
    request as sent (``None`` only in the record a sink's ``start`` receives, which the
    worker does not need: it knows the format from the prepared turn)."""

    output_format: OutputFormat
    thinking_enabled: bool
    request: UnifiedRequest | None = None


class Held(str):
    """Text a stop-sequence check held back (it might have begun a stop sequence) and
    sends when the answer ends without one: the end of earlier tokens' text, not a token
    of its own."""

    __slots__ = ()


@attrs.frozen
class GenerationEnd:
    """Sent after the last token.

    ``finish_reason``: ``"stop"`` (an end-of-generation token), ``"stop_sequence"``
    (one of the request's stop sequences), ``"length"`` (``max_tokens`` reached),
    ``"context_length"`` (the context is full) or ``"cancelled"`` (the stream was
    dropped). A character cut in half by the last token
    is not sent at all (no U+FFFD); its tokens count in ``completion_tokens``.
    """

    prompt_cache_usage: PromptCacheUsage
    completion_tokens: int
    finish_reason: str
