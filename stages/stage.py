"""The three kinds of stage in a turn, one protocol each.

| kind | what it is | who uses it |
|---|---|---|
| :class:`Transformer` (in a :class:`Transform`) | sans-IO: ``feed(batch)`` returns items, ``end()`` flushes | the built-in stages (hooks, encode, SSE parse, decode, output parse) |
| :class:`Source` | for an input batch, an async generator of batches, made by I/O | the transport (one batch per network read), the engine (one per wake-up) |
| :data:`Stage` | an actor ``async def stage(receive, send)`` on two memory channels | a user's stage |

The runner (:mod:`cuca.stages.runner`) runs the same objects either fused into the
consumer's pull or each as its own actor; none of them knows which.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import attrs
import trio

__all__ = ["PASS", "Source", "Stage", "Transform", "Transformer"]

In = TypeVar("In")
Out = TypeVar("Out")

Stage: TypeAlias = Callable[
    [trio.MemoryReceiveChannel[Sequence[In]], trio.MemorySendChannel[Sequence[Out]]],
    Awaitable[None],
]
"""A user stage, an actor: reads batches (lists) of ``In`` items from one channel, writes
batches of ``Out`` items to the next, and closes its send channel when its input ends. A
batch is what one network read (or one engine wake-up) produced, so the per-hop cost is
paid per read, not per token."""


class Transformer(Generic[In, Out]):
    """A built-in stage of one turn: a batch in, items out; ``end`` once the input has
    ended, for what it still holds.

    ``done`` turns true once it wants no more input (the decoder, after the provider's
    end marker and a short drain): the runner then stops what feeds it (the response is
    closed) and ends the turn normally. ``feed`` and ``end`` are coroutines only so that
    plugin hooks can await; they do no I/O. A transformer that raises ends the turn.
    """

    done: bool = False

    async def feed(self, batch: Sequence[In], /) -> Sequence[Out]:
        raise NotImplementedError

    async def end(self) -> Sequence[Out]:
        return ()


@attrs.frozen
class Transform(Generic[In, Out]):
    """A built-in point as the pipeline holds it: ``new()`` makes its transformer for one
    turn; ``new=None`` is a point with nothing to do this turn (no plugin hooks), left
    out of the run at no cost."""

    new: Callable[[], Transformer[In, Out]] | None = None


PASS: Transform[Any, Any] = Transform()
"""The point that passes its items on untouched."""


@attrs.frozen
class Source(Generic[In, Out]):
    """A built-in point that does I/O: ``open(batch)`` gives the batches it produces for
    one input batch, as an async generator that whoever stops reading early closes
    (``aclose``), which closes what it holds open (the response, the engine's turn)."""

    open: Callable[[Sequence[In]], AsyncGenerator[Sequence[Out], None]]


Built: TypeAlias = Transform[Any, Any] | Source[Any, Any]
"""A built-in point's stage."""
