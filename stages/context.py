"""What the stages of one turn share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import trio

from cuca.types import TurnSummary, UnifiedRequest, UnifiedResponse

__all__ = ["Stage", "TurnContext"]

Stage: TypeAlias = Callable[
    [trio.MemoryReceiveChannel[Any], trio.MemorySendChannel[Any]], Awaitable[None]
]
"""A stage actor: reads batches from one channel, writes batches to the next, and closes
its send channel when its input ends. A batch is a list: what one network read (or one
engine step) produced, so the per-hop cost is paid per read, not per token."""


class TurnContext:
    """The state the stages of one turn share.

    ``request`` is the request as the request hooks left it; ``summary`` is set by the
    decoder (or the engine) when the stream ends; ``error`` is the first error that
    ended the turn, raised to the consumer after every item produced before it;
    ``response`` is the turn's terminal record, set by the chunk-hooks stage when the
    turn ended cleanly.
    """

    def __init__(self, request: UnifiedRequest) -> None:
        self.request = request
        self.summary: TurnSummary | None = None
        self.error: Exception | None = None
        self.response: UnifiedResponse | None = None
        self.finished = trio.Event()  # set once every stage of the turn has ended

    def fail(self, error: Exception) -> None:
        """Record ``error`` as the reason the turn ended (the first one wins)."""
        if self.error is None:
            self.error = error
