"""The records a local turn's generation hands to the pipeline's stages.

The model's generation runs in a thread; the ``engine`` stage relays what it produces
to the ``output_parse`` stage. Between them travel plain records, defined here so that
neither the model (which produces them) nor the worker stages (which consume them)
import each other: a :class:`GenerationStart` first (made by the worker from the prepared
turn, on the trio side), then one ``str`` per generated token (possibly empty: half of a
UTF-8 character, a control token that is not part of the output format, or text held
back by a stop-sequence check), at most one :class:`Held`, then a :class:`GenerationEnd`.
"""

from __future__ import annotations

import threading
from typing import Protocol

import attrs

from cuca.types import PromptCacheUsage, UnifiedRequest

from .formats import OutputFormat

__all__ = ["GenerationEnd", "GenerationStart", "Held", "TokenSink"]


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


class TokenSink(Protocol):
    """Where a turn's generation puts its output (called from the engine's thread,
    never blocking it)."""

    stop_flag: threading.Event
    """Set when the turn is cancelled (its consumer is gone)."""

    def token(self, text: str) -> None:
        """One generated token's text."""

    def full(self) -> bool:
        """Whether the consumer is behind: produce no more tokens for now."""

    def stopped(self) -> bool:
        """Whether to stop before the next token."""

    def finish(self, result: GenerationEnd | BaseException) -> None:
        """The turn is over, with this end or this error (called exactly once)."""
