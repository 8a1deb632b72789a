"""The turn pipeline as data: named stages, chained where they can be, joined by bounded
memory channels where they must be.

A :class:`Pipeline` is an ordered tuple of named stages. Built-in stages are
:class:`~cuca.stages.chain.Chained`: consecutive ones run as one call chain, the last
such chain in the consumer's own task (:mod:`cuca.stages.pull`), any before it in a
task of the turn's nursery. A user's stage is an actor ``async def stage(receive,
send)`` with a task of its own, so inserting one (:func:`before`, :func:`after`) splits
the chain there with a channel on each side::

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
from functools import partial
from typing import Any, Generic, TypeAlias, TypeVar, overload

import attrs
import trio

from cuca.errors import ConfigurationError, PluginError
from cuca.turn import TurnState

from .chain import Chained, Sink, StopInput, open_chain
from .points import POINTS, Point
from .pull import ChainPuller, ChannelPuller, Puller, Upstream, UpstreamFailed

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
        share one task, each user stage has its own; the last group, when it is a chain
        of built-in stages, runs in the consumer's task."""
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

    def start(
        self, state: TurnState, first: Any
    ) -> tuple[Callable[[], Awaitable[None]] | None, Puller]:
        """The turn that starts with ``first`` (sent to the first stage as a one-item
        batch): the tasks it needs, as one function to run in a nursery (``None`` when
        it needs none), and the :class:`~cuca.stages.pull.Puller` its consumer reads.

        The last run of chained stages is run by the consumer's task as it pulls
        (:mod:`cuca.stages.pull`); every unit before it gets a task, joined by channels.
        Errors are recorded on ``state``, never raised; the caller sets
        ``state.finished`` once the tasks have ended.
        """
        units = self._units()
        last = units[-1]
        if not isinstance(last[0].run, Chained):  # a user stage ends the turn
            send, receive = trio.open_memory_channel[Sequence[Any]](0)
            return partial(self._run_units, units, state, first, send, _Ended()), ChannelPuller(
                receive
            )
        stages = [stage.run for stage in last if isinstance(stage.run, Chained)]
        if len(units) == 1:
            return None, ChainPuller(stages, _first(first), state)
        send, receive = trio.open_memory_channel[Sequence[Any]](self.buffer)
        ended = _Ended()
        background = partial(self._run_units, units[:-1], state, first, send, ended)
        point = POINTS.get(last[0].name)
        upstream = units[-2][-1].name
        head = None if point is None else partial(_Checked, point=point, upstream=upstream)
        puller = ChainPuller(stages, _from(receive, ended), state, head, receive.close)
        return background, puller

    async def _run_units(
        self,
        units: list[list[NamedStage]],
        state: TurnState,
        first: Any,
        out: trio.MemorySendChannel[Any],
        out_ended: _Ended,
    ) -> None:
        """Run ``units`` as tasks until the last one closes ``out`` (``out_ended`` tells
        when it has ended, and whether it failed)."""
        send, receive = trio.open_memory_channel[Sequence[Any]](1)
        send.send_nowait([first])
        send.close()
        upstream_ended: _Ended | None = None
        async with trio.open_nursery() as nursery:
            for index, unit in enumerate(units):
                if index == len(units) - 1:
                    next_send, next_receive, ended = out, None, out_ended
                else:
                    next_send, next_receive = trio.open_memory_channel[Sequence[Any]](
                        self.buffer
                    )
                    ended = _Ended()
                name = "+".join(stage.name for stage in unit)
                upstream = units[index - 1][-1].name if index else None
                task = _task(unit, upstream, upstream_ended, receive, next_send, state)
                nursery.start_soon(ended.track, task, name=name)
                upstream_ended = ended
                if next_receive is not None:
                    receive = next_receive


def _first(first: Any) -> Upstream:
    """The input of a turn whose consumer runs it all: ``first``, then nothing."""
    given = False

    async def upstream() -> Sequence[Any] | None:
        nonlocal given
        if given:
            return None
        given = True
        return [first]

    return upstream


def _from(receive: trio.MemoryReceiveChannel[Sequence[Any]], ended: _Ended) -> Upstream:
    """The input of the last chain from the task before it; its end is a clean end only
    once that task has ended without error (a user stage that raised has closed its
    output on the way out)."""

    async def upstream() -> Sequence[Any] | None:
        try:
            return await receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            await ended.event.wait()
            if ended.failed:
                raise UpstreamFailed from None
            return None

    return upstream


class _Ended:
    """Whether a task of the turn has ended, and whether it failed (or was cancelled)."""

    def __init__(self) -> None:
        self.event = trio.Event()
        self.failed = True  # until the task has returned cleanly

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
    head = open_chain([stage.run for stage in unit if isinstance(stage.run, Chained)], send)
    point = POINTS.get(unit[0].name)
    if upstream is not None and point is not None:
        head = _Checked(head, point=point, upstream=upstream)

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

    def __init__(self, head: Sink[Any], *, point: Point[Any, Any], upstream: str) -> None:
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
