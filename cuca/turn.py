"""The turn's own record, what a turn yields, and the item that ends a turn.

Everything else a turn knows travels through its channels as items (see
:mod:`cuca.stages.points`): what is left here is what no single stage owns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import attrs
import trio

from .errors import CucaError
from .types import Block, TurnSummary, UnifiedRequest, UnifiedResponse

__all__ = ["EndOfTurn", "Item", "TurnState", "split_end"]

Item: TypeAlias = Block | CucaError
"""What a turn yields: a block, or an error that did not end the turn."""


class TurnState:
    """What one turn shares beyond its items: the error that ended it (the first one
    recorded wins) and whether every stage has ended."""

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.finished = trio.Event()

    def fail(self, error: Exception) -> None:
        """Record ``error`` as the reason the turn ended, unless one already was."""
        if self.error is None:
            self.error = error


@attrs.frozen
class EndOfTurn:
    """The last item of a turn that ended cleanly, emitted by ``decode`` (or the engine's
    ``output_parse``): the request as sent, and what the provider reported about the turn.
    The consumer's stream turns it into the turn's :class:`UnifiedResponse`; it is never
    yielded to the user."""

    request: UnifiedRequest
    summary: TurnSummary
    endpoint: str | None = None
    """The base URL the turn went to (``None`` for the local engine)."""
    cached: bool = False
    """Whether the turn was answered by a response cache (nothing was sent)."""

    def response(self) -> UnifiedResponse:
        """The turn's terminal record."""
        summary = self.summary
        return UnifiedResponse(
            provider=self.request.provider,
            model=self.request.model,
            usage=summary.usage,
            prompt_cache_usage=summary.prompt_cache_usage,
            finish_reason=summary.finish_reason,
            counted_usage=summary.counted_usage,
            endpoint=self.endpoint,
            cached=self.cached,
            compaction=self.request.compaction,
        )


def split_end(batch: Sequence[Any]) -> tuple[Sequence[Any], EndOfTurn | None]:
    """The items of ``batch`` without the turn's :class:`EndOfTurn`, and that end (``None``
    when the batch does not hold it). The one place where the end is taken out of the
    items: the stream and the observers both call it."""
    for item in batch:
        if type(item) is EndOfTurn:
            return [i for i in batch if type(i) is not EndOfTurn], item
    return batch, None
