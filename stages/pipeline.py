"""The turn pipeline as data: named stages, chained where they can be, joined by bounded
memory channels where they must be.

A :class:`Pipeline` is an ordered tuple of named stages. Built-in stages are
:class:`~cuca.stages.chain.Chained`: consecutive ones run as one call chain in one task.
A user's stage is an actor ``async def stage(receive, send)`` with a task of its own, so
inserting one (:func:`before`, :func:`after`) splits the chain there with a channel on
each side::

    async def count_bytes(receive, send):
        async with send:
            async for batch in receive:
                counter.add(sum(len(chunk) for chunk in batch if isinstance(chunk, bytes)))
                await send.send(batch)

    client = CucaClient(..., stages=[after("transport", count_bytes)])

Errors: a stage that raises ends the turn. Its error is recorded on the turn's
:class:`~cuca.turn.TurnState` (the first one wins), its input channel is closed
(upstream stops quietly) and its output channel is closed (downstream drains what it
already has), so the consumer receives every item produced before the error, then the
error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar, overload

import attrs
import trio

from cuca.errors import ConfigurationError, PluginError
from cuca.turn import TurnState

from .chain import Chained, Sink, StopInput
from .points import POINTS, Point

__all__ = ["Insertion", "NamedStage", "Pipeline", "Stage", "after", "before"]

In = TypeVar("In")
Out = TypeVar("Out")
T = TypeVar("T")

Stage: TypeAlias = Callable[
    [trio.MemoryReceiveChannel[Sequence[In]], trio.MemorySendChannel[Sequence[Out]]],
    Awaitable[None],
]
"""A user stage, an actor: reads batches (lists) of ``In`` items from one channel, writes
batches of ``Out`` items to the next, and closes its send channel when its input ends. A
batch is what one network read (or one engine wake-up) produced, so the per-hop cost is
paid per read, not per token."""

DEFAULT_BUFFER = 1
"""Batches each channel may hold. Small on purpose: a slow consumer slows the transport."""


@attrs.frozen
class NamedStage:
    """A stage and the name other stages are inserted relative to: a built-in
    :class:`~cuca.stages.chain.Chained` stage, or a user's actor."""

    name: str
    run: Chained[Any, Any] | Stage[Any, Any]


@attrs.frozen
class Insertion(Generic[T]):
    """A user's stage, to be placed just ``before`` or just ``after`` a named point;
    ``T`` is the type of the items it reads and writes."""

    stage: Stage[T, T]
    point: str
    where: str = "after"
    name: str = "custom"


@overload
def after(point: Point[Any, T], stage: Stage[T, T], name: str = ...) -> Insertion[T]: ...
@overload
def after(point: str, stage: Stage[Any, Any], name: str = ...) -> Insertion[Any]: ...
def after(point: Point[Any, Any] | str, stage: Stage[Any, Any], name: str = "custom") -> Any:
    """Insert ``stage`` right after ``point`` (a :class:`Point`, or its name): it reads
    and writes what that point writes."""
    return Insertion(stage, str(point), "after", name)


@overload
def before(point: Point[T, Any], stage: Stage[T, T], name: str = ...) -> Insertion[T]: ...
@overload
def before(point: str, stage: Stage[Any, Any], name: str = ...) -> Insertion[Any]: ...
def before(point: Point[Any, Any] | str, stage: Stage[Any, Any], name: str = "custom") -> Any:
    """Insert ``stage`` right before ``point`` (a :class:`Point`, or its name): it reads
    and writes what that point reads."""
    return Insertion(stage, str(point), "before", name)


def _stage_tuple(stages: Iterable[NamedStage]) -> tuple[NamedStage, ...]:
    return tuple(stages)


@attrs.frozen
class Pipeline:
    """An ordered tuple of named stages: the shape of one turn."""

    stages: tuple[NamedStage, ...] = attrs.field(converter=_stage_tuple)
    buffer: int = DEFAULT_BUFFER

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self.stages)

    @property
    def tasks(self) -> tuple[tuple[str, ...], ...]:
        """The stage names each task of the turn runs: consecutive built-in stages
        share one task, each user stage has its own."""
        return tuple(tuple(stage.name for stage in unit) for unit in self._units())

    def insert(self, insertion: Insertion[Any]) -> Pipeline:
        """A new pipeline with ``insertion`` placed; unknown points are a configuration
        error naming the points that exist."""
        names = self.names
        if insertion.point not in names:
            known = ", ".join(names)
            raise ConfigurationError(f"no stage named {insertion.point!r} (stages: {known})")
        index = names.index(insertion.point) + (1 if insertion.where == "after" else 0)
        new = NamedStage(insertion.name, insertion.stage)
        return attrs.evolve(self, stages=(*self.stages[:index], new, *self.stages[index:]))

    def extended(self, insertions: Iterable[Insertion[Any]]) -> Pipeline:
        pipeline = self
        for insertion in insertions:
            pipeline = pipeline.insert(insertion)
        return pipeline

    def _units(self) -> list[list[NamedStage]]:
        """The stages grouped by task: runs of chained stages, and single actors."""
        units: list[list[NamedStage]] = []
        for stage in self.stages:
            chained = isinstance(stage.run, Chained)
            if chained and units and isinstance(units[-1][-1].run, Chained):
                units[-1].append(stage)
            else:
                units.append([stage])
        return units

    async def run(self, state: TurnState, first: Any, out: trio.MemorySendChannel[Any]) -> None:
        """Run every stage until the last one closes ``out``.

        ``first`` is sent to the first stage as a one-item batch. Returns when every
        stage has ended; errors are recorded on ``state``, never raised. The caller sets
        ``state.finished`` once it is done with the turn.
        """
        send, receive = trio.open_memory_channel[Sequence[Any]](1)
        send.send_nowait([first])
        send.close()
        upstream_ended: _Ended | None = None
        async with trio.open_nursery() as nursery:
            units = self._units()
            for index, unit in enumerate(units):
                if index == len(units) - 1:
                    next_send, next_receive = out, None
                else:
                    next_send, next_receive = trio.open_memory_channel[Sequence[Any]](
                        self.buffer
                    )
                name = "+".join(stage.name for stage in unit)
                upstream = units[index - 1][-1].name if index else None
                ended = _Ended()
                task = _task(unit, upstream, upstream_ended, receive, next_send, state)
                nursery.start_soon(ended.track, task, name=name)
                upstream_ended = ended
                if next_receive is not None:
                    receive = next_receive


class _Ended:
    """Whether a task of the turn has ended, and whether it failed."""

    def __init__(self) -> None:
        self.event = trio.Event()
        self.failed = False

    async def track(self, task: Callable[[], Awaitable[bool]]) -> None:
        try:
            self.failed = not await task()
        finally:
            self.event.set()


def _task(
    unit: list[NamedStage],
    upstream: str | None,
    upstream_ended: _Ended | None,
    receive: trio.MemoryReceiveChannel[Any],
    send: trio.MemorySendChannel[Any],
    state: TurnState,
) -> Callable[[], Awaitable[bool]]:
    """The task running ``unit``: one actor, or a chain of built-in stages."""
    first = unit[0].run
    if not isinstance(first, Chained):

        async def actor() -> bool:
            return await _guarded(first, receive, send, state)

        return actor
    head: Sink[Any] = send
    for stage in reversed(unit):
        assert isinstance(stage.run, Chained)
        head = stage.run.open(head)
    point = POINTS.get(unit[0].name)
    if upstream is not None and point is not None:
        head = _Checked(head, point, upstream)

    async def chain() -> bool:
        return await _drive(head, receive, send, state, upstream_ended)

    return chain


async def _guarded(
    stage: Stage[Any, Any],
    receive: trio.MemoryReceiveChannel[Any],
    send: trio.MemorySendChannel[Any],
    state: TurnState,
) -> bool:
    """Run one actor; record its error, then close both of its channels. Returns
    whether it ended without error."""
    with receive:
        async with send:
            try:
                await stage(receive, send)
            except trio.BrokenResourceError:
                pass  # downstream stopped listening (it failed or finished): end quietly
            except Exception as exc:
                state.fail(exc)
                return False
    return True


async def _drive(
    head: Sink[Any],
    receive: trio.MemoryReceiveChannel[Any],
    send: trio.MemorySendChannel[Any],
    state: TurnState,
    upstream: _Ended | None,
) -> bool:
    """Feed a chain every batch from ``receive``, then close it; errors as
    :func:`_guarded` records them.

    The end of the input is a clean end only once the task before has ended without
    error: a user stage that raised has closed its output on the way out (``async with
    send``), and the chain must not take that for the end of the response.
    """
    with receive:
        async with send:
            try:
                try:
                    async for batch in receive:
                        await head.send(batch)
                except StopInput:
                    pass  # the chain has all it wants: close it normally
                if upstream is not None:
                    await upstream.event.wait()
                    if upstream.failed:
                        return True  # the turn failed upstream: end quietly
                await head.aclose()
            except trio.BrokenResourceError:
                pass
            except Exception as exc:
                state.fail(exc)
                return False
    return True


class _Checked:
    """The head of a chain fed by a user stage: every item must be of a type the first
    built-in stage reads, or the turn ends with a PluginError naming the user stage."""

    def __init__(self, head: Sink[Any], point: Point[Any, Any], upstream: str) -> None:
        self._head = head
        self._point = point
        self._upstream = upstream
        self._types = point.accepted_types()

    async def send(self, batch: Sequence[Any], /) -> None:
        for item in batch:
            if not isinstance(item, self._types):
                raise PluginError(
                    self._upstream,
                    f"stage {self._upstream!r} sent a {type(item).__name__} to "
                    f"{self._point.name!r}, which reads {self._point.reads.replace('`', '')}",
                )
        await self._head.send(batch)

    async def aclose(self) -> None:
        await self._head.aclose()
