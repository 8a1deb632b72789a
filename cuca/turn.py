"""The turn's own record, what a turn yields, and the item that ends a turn.

Everything else a turn knows travels through its channels as items (see
:mod:`cuca.stages.points`): what is left here is what no single stage owns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import attrs
import trio

from .errors import CucaError
from .types import Block, TurnSummary, UnifiedRequest, UnifiedResponse

__all__ = [
    "AttemptHead",
    "EndOfTurn",
    "Insertion",
    "Item",
    "RateLimitHint",
    "Stage",
    "TurnState",
    "split_end",
]

In = TypeVar("In")
Out = TypeVar("Out")
T = TypeVar("T")

Item: TypeAlias = Block | CucaError
"""What a turn yields: a block, or an error that did not end the turn."""


Stage: TypeAlias = Callable[
    [trio.MemoryReceiveChannel[Sequence[In]], trio.MemorySendChannel[Sequence[Out]]],
    Awaitable[None],
]
"""A user stage, an actor: reads batches (lists) of ``In`` items from one channel, writes
batches of ``Out`` items to the next, and closes its send channel when its input ends. A
batch is what one network read (or one engine wake-up) produced, so the per-hop cost is
paid per read, not per token."""


@attrs.frozen
class Insertion(Generic[T]):
    """A user's stage, to be placed just ``before`` or just ``after`` a named point;
    ``T`` is the type of the items it reads and writes (made by
    :func:`cuca.stages.after` and :func:`cuca.stages.before`; here, on the turn's own
    floor, so that what passes a turn's stages on names it without the stages)."""

    stage: Stage[T, T]
    point: str
    where: str = "after"
    name: str = "custom"


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
            provider_finish_reason=summary.provider_finish_reason,
            counted_usage=summary.counted_usage,
            endpoint=self.endpoint,
            cached=self.cached,
            compaction=self.request.compaction,
        )


@attrs.frozen
class RateLimitHint:
    """What a response's rate-limit headers say, as the backend's adapter reads them (each
    wire knows its vendor's headers; a rate limiter reads only this): ``pause`` is how
    long, in seconds, every turn sharing the limiter should wait (``None``: no need);
    ``remaining`` maps a limit (``"requests"``, ``"tokens"``, ``"input-tokens"``,
    ``"output-tokens"``) to what is left of it, ``resets`` to the seconds until it is
    whole again, ``limits`` to the whole limit (when the headers say)."""

    pause: float | None
    remaining: dict[str, int] = attrs.field(factory=dict)
    resets: dict[str, float] = attrs.field(factory=dict)
    limits: dict[str, int] = attrs.field(factory=dict)


@attrs.frozen
class AttemptHead:
    """The head of one attempt's answer, as a turn's *during* seam shows it to the
    turn's gates: every attempt's, a non-2xx one the retry absorbed or gave up on, and
    the 2xx one. ``rate_limits`` is what its headers say about the server's limits
    (``None``: nothing), read by the backend's adapter."""

    status: int
    headers: tuple[tuple[str, str], ...]
    rate_limits: RateLimitHint | None = None


def split_end(batch: Sequence[Any]) -> tuple[Sequence[Any], EndOfTurn | None]:
    """The items of ``batch`` without the turn's :class:`EndOfTurn`, and that end (``None``
    when the batch does not hold it). The one place where the end is taken out of the
    items: the stream and the observers both call it."""
    for item in batch:
        if type(item) is EndOfTurn:
            return [i for i in batch if type(i) is not EndOfTurn], item
    return batch, None
