"""Where a local turn's generation puts its output (:class:`TokenSink`), and the records
it hands to the pipeline's stages.

The records (:class:`GenerationStart`, one ``str`` per token, at most one :class:`Held`,
a :class:`GenerationEnd`) are declared in :mod:`cuca.generation`, on the turn's own floor,
where the points table names them without importing the engine; they are re-exported
here, where the engine's modules and its readers have always found them.
"""

from __future__ import annotations

import threading
from typing import Protocol

from cuca.generation import GenerationEnd as GenerationEnd
from cuca.generation import GenerationStart as GenerationStart
from cuca.generation import Held as Held

__all__ = ["GenerationEnd", "GenerationStart", "Held", "TokenSink"]


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
