"""Chained stages: built-in stages that run inside their neighbour's task.

A channel hop costs a task switch per batch. The built-in stages of a turn need no task
of their own: each is a :class:`Sink` that transforms what it is sent and sends the
result on to the next sink, so consecutive built-in stages compose into one call chain,
run by one task, like operators fused in a stream processor.

The transport and the engine are chained too, as *sources*: for each input batch they
produce batches of their own by I/O (a socket read, a wake-up from the model's thread),
as an async iterator (:func:`source_stage`). A task driving a chain pushes each of them
down it at once; the consumer's own task can instead pull them one at a time
(:mod:`cuca.stages.pull`), so a turn with no user stage after its source runs in the
consumer's task, with no channel hop at all.

A channel (and a task) exists only where a user stage was inserted.
``MemorySendChannel`` is itself a sink, which is how a chain ends in a channel.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeAlias, TypeVar

import attrs
import trio

__all__ = [
    "Chained",
    "Collector",
    "Sink",
    "Source",
    "Step",
    "StopInput",
    "as_actor",
    "open_chain",
    "passthrough",
    "source_stage",
]

In = TypeVar("In")
Out = TypeVar("Out")
T = TypeVar("T")
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


Source: TypeAlias = Callable[[Sequence[In]], AsyncGenerator[Sequence[Out], None]]
"""A stage that does I/O: for one input batch, the batches it produces (an async
generator, closed with ``aclose`` by whoever stops reading it early)."""


@attrs.frozen
class Chained(Generic[In, Out]):
    """A built-in stage as the pipeline holds it: ``open(out)`` returns the sink that
    feeds it, given the sink its output goes to; ``source`` is set for a stage that does
    I/O (:func:`source_stage`), which the consumer's task may pull from instead."""

    open: Callable[[Sink[Out]], Sink[In]]
    source: Source[In, Out] | None = None


def source_stage(source: Source[In, Out]) -> Chained[In, Out]:
    """The chained stage of ``source``: pushed to, it sends each batch ``source``
    produces on down the chain; a :class:`StopInput` from there stops reading (the
    iterator is closed, which closes the response) and ends the stage normally."""

    class Pump(Step[In, Out]):
        async def send(self, batch: Sequence[In], /) -> None:
            produced = source(batch)
            try:
                async for out in produced:
                    await self.out.send(out)
            except StopInput:
                pass
            finally:
                await produced.aclose()

    return Chained(Pump, source)


class Collector(Generic[T]):
    """The sink at the end of a chain run by the consumer's task: it keeps what it is
    sent until :meth:`take`."""

    def __init__(self) -> None:
        self.items: list[T] = []

    async def send(self, batch: Sequence[T], /) -> None:
        self.items += batch

    async def aclose(self) -> None:
        pass

    def take(self) -> list[T]:
        items, self.items = self.items, []
        return items


def open_chain(stages: Sequence[Chained[object, object]], out: Sink[object]) -> Sink[object]:
    """The head of ``stages`` run as one call chain whose output goes to ``out``."""
    head = out
    for stage in reversed(stages):
        head = stage.open(head)
    return head


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
