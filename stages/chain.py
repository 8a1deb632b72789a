"""Chained stages: built-in stages that run inside their neighbour's task.

A channel hop costs a task switch per batch. The built-in stages of a turn need no task
of their own: each is a :class:`Sink` that transforms what it is sent and sends the
result on to the next sink, so consecutive built-in stages compose into one call chain,
run by one task, like operators fused in a stream processor. The transport and the
engine are chained too: their I/O (a socket read, a wake-up from the model's thread)
happens inside the chain, and each read is pushed down it at once.

A channel (and a task) exists only where a user stage was inserted, and between the
turn and its consumer. ``MemorySendChannel`` is itself a sink, which is how a chain
ends in a channel.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

import attrs
import trio

__all__ = ["Chained", "Sink", "Step", "StopInput", "as_actor", "passthrough"]

In = TypeVar("In")
Out = TypeVar("Out")
T_contra = TypeVar("T_contra", contravariant=True)


class Sink(Protocol[T_contra]):
    """Where a stage's output goes: batches are sent, then the sink is closed once.

    ``trio.MemorySendChannel[Sequence[T]]`` is a ``Sink[T]``.
    """

    async def send(self, value: Sequence[T_contra], /) -> None: ...

    async def aclose(self) -> None: ...


class StopInput(Exception):
    """Raised from ``send`` by a chained stage that wants no more input (the decoder,
    once the provider's end marker arrived and the rest was drained). The transport,
    or the task driving the chain, stops feeding it and closes it normally."""


class Step(Generic[In, Out]):
    """Base of the built-in chained stages: a sink that writes to the sink ``out``.

    ``aclose`` closes ``out`` after whatever the subclass still has to say. A step that
    raises does not close ``out``: the error ends the turn, and the task running the
    chain closes the channel at its end.
    """

    def __init__(self, out: Sink[Out]) -> None:
        self.out = out

    async def send(self, batch: Sequence[In], /) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        await self.out.aclose()


@attrs.frozen
class Chained(Generic[In, Out]):
    """A built-in stage as the pipeline holds it: ``open(out)`` returns the sink that
    feeds it, given the sink its output goes to."""

    open: Callable[[Sink[Out]], Sink[In]]


def passthrough(out: Sink[Out]) -> Sink[Out]:
    """The ``open`` of a stage with nothing to do this turn (no plugin hooks): the
    stage's input goes straight to its output, at no cost."""
    return out


def as_actor(stage: Chained[In, Out]) -> Callable[..., Awaitable[None]]:
    """Run a chained stage alone, as an actor between two channels (to test it, or to
    drive it by hand): ``await as_actor(stage)(receive, send)``."""

    async def actor(
        receive: trio.MemoryReceiveChannel[Sequence[In]],
        send: trio.MemorySendChannel[Sequence[Out]],
    ) -> None:
        async with send:
            sink = stage.open(send)
            try:
                async for batch in receive:
                    await sink.send(batch)
            except StopInput:
                pass
            await sink.aclose()

    return actor
