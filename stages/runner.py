"""The one runner of a turn: the declared stages, run fused or as actors.

A turn's stages are built-in points (:class:`~cuca.stages.stage.Transform`,
:class:`~cuca.stages.stage.Source`) and user actors, in the order of the points table
plus the user's insertions. The runner groups them into *units* and runs each unit
either in a task of the turn's nursery, between two bounded memory channels, or in the
consumer's own task as it pulls:

| mode | units | the consumer reads |
|---|---|---|
| fused (default) | each run of built-in points is one unit; each user stage is one | the last run itself, when it is built-in (no channel, no task switch); else the last channel |
| actors (``fused=False``) | every point is one unit | the last channel |

A run of built-in points is a :class:`Segment`: an async iterator of batches that pulls
its input, calls its transformers in order, and reads its source (if it has one) batch
by batch. The same :class:`Segment` class runs one point in actors mode and six in
fused mode: the stages never know which.

Errors: a unit that raises records its error on the turn's
:class:`~cuca.turn.TurnState` (the first one wins) before its output channel closes,
so what comes after it sees the end of its input only once the error is recorded: it
then ends quietly, without flushing (:class:`UpstreamFailed`). Every item produced
before the error reaches the consumer, then the error is raised from the iteration.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from functools import partial
from typing import Any, Protocol

import trio

from cuca.errors import PluginError, TransportError
from cuca.turn import TurnState

from .points import POINTS, Point
from .stage import Built, Source, Stage, Transform, Transformer

__all__ = ["Puller", "Segment", "UpstreamFailed", "as_actor", "start", "unit_names"]

DEFAULT_BUFFER = 1
"""Batches each channel may hold. Small on purpose: a slow consumer slows the transport."""

Batch = Sequence[Any]


class Batches(Protocol):
    """An async iterator of non-empty batches that its reader closes."""

    def __aiter__(self) -> Batches: ...

    async def __anext__(self) -> Batch: ...

    async def aclose(self) -> None: ...


class UpstreamFailed(Exception):
    """What fed a unit ended in an error (already recorded on the turn): the unit ends
    quietly, without flushing what it holds."""


class _Input:
    """The input of a unit from the channel of the unit before it.

    Its end is a clean end only if no unit has failed (a failing unit records its error
    before its channel closes). After a user stage, ``check`` makes every item a type the
    next built-in point reads, or the turn ends with a PluginError naming the stage.
    """

    def __init__(
        self,
        receive: trio.MemoryReceiveChannel[Batch],
        state: TurnState,
        check: tuple[Point[Any, Any], str] | None = None,
    ) -> None:
        self.receive = receive
        self._state = state
        self._check = check
        self._types = check[0].accepted_types() if check is not None else ()

    def __aiter__(self) -> _Input:
        return self

    async def __anext__(self) -> Batch:
        try:
            batch = await self.receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            if self._state.error is not None:
                raise UpstreamFailed from None
            raise StopAsyncIteration from None
        if self._check is not None:
            self._checked(batch)
        return batch

    def _checked(self, batch: Batch) -> None:
        assert self._check is not None
        point, sender = self._check
        for item in batch:
            if not isinstance(item, self._types):
                raise PluginError(
                    sender,
                    f"stage {sender!r} sent a {type(item).__name__} to {point.name!r}, "
                    f"which reads {point.reads.replace('`', '')}",
                )

    async def aclose(self) -> None:
        self.receive.close()


_READ, _FLUSH_HEAD, _FLUSH_TAIL, _DONE = range(4)


class Segment:
    """A run of built-in points, pulled: ``head`` transformers, then (optionally) a
    source, then ``tail`` transformers, over the batches of ``upstream``.

    Each input batch goes through ``head``; what comes out opens the source, whose
    batches go one by one through ``tail`` (without a source, the input goes through
    ``tail`` directly). Once the input ends, every transformer's ``end`` is called, in
    order, its output going on through the ones after it. A transformer that turns
    ``done`` stops its input: the source (or the upstream) is closed, and the ends run.

    A read cancelled while it waits on the source (or a transformer) leaves the segment
    broken: the source is gone, and the next read raises a TransportError, never a clean
    end of a turn that was cut. A read cancelled while it waits for the upstream channel
    loses nothing.
    """

    def __init__(
        self,
        upstream: Batches,
        head: Sequence[Transformer[Any, Any]] = (),
        source: Source[Any, Any] | None = None,
        tail: Sequence[Transformer[Any, Any]] = (),
    ) -> None:
        self._upstream = upstream
        self._head = list(head) if source is not None else []
        self._source = source
        self._tail = list(tail) if source is not None else [*head, *tail]
        self._reading: AsyncGenerator[Batch, None] | None = None
        self._phase = _READ
        self._resting = False  # waiting for the upstream: a cancel there loses nothing
        self._broken = False

    def __aiter__(self) -> Segment:
        return self

    async def __anext__(self) -> Batch:
        if self._broken:
            raise TransportError("the turn's read was cancelled: its response is closed")
        try:
            return await self._next()
        except trio.Cancelled:
            if not self._resting:
                self._broken = True
            raise
        except UpstreamFailed:
            await self.aclose()
            raise StopAsyncIteration from None

    async def _next(self) -> Batch:
        while True:
            if self._reading is not None:
                try:
                    batch = await self._reading.__anext__()
                except StopAsyncIteration:
                    self._reading = None
                    continue
                out = await self._push(self._tail, batch)
                if self._stopped(self._tail):
                    await self._close_reading()
                    await self._upstream.aclose()
                    self._phase = _FLUSH_TAIL
            elif self._phase == _READ:
                self._resting = True
                try:
                    batch = await self._upstream.__anext__()
                except StopAsyncIteration:
                    self._phase = _FLUSH_HEAD
                    continue
                finally:
                    self._resting = False
                if self._source is None:
                    out = await self._push(self._tail, batch)
                    if self._stopped(self._tail):
                        await self._upstream.aclose()
                        self._phase = _FLUSH_TAIL
                else:
                    out = await self._push(self._head, batch)
                    if self._stopped(self._head):
                        await self._upstream.aclose()
                        self._phase = _FLUSH_HEAD
                    if out:
                        self._reading = self._source.open(out)
                    continue
            elif self._phase == _FLUSH_HEAD:
                self._phase = _FLUSH_TAIL
                if self._source is not None:
                    out = await self._flush(self._head)
                    if out:
                        self._reading = self._source.open(out)
                continue
            elif self._phase == _FLUSH_TAIL:
                self._phase = _DONE
                out = await self._flush(self._tail)
            else:
                raise StopAsyncIteration
            if out:
                return out

    @staticmethod
    async def _push(stages: Sequence[Transformer[Any, Any]], batch: Batch) -> Batch:
        for stage in stages:
            batch = await stage.feed(batch)
            if not batch:
                break
        return batch

    @staticmethod
    def _stopped(stages: Sequence[Transformer[Any, Any]]) -> bool:
        for stage in stages:
            if stage.done:
                return True
        return False

    @classmethod
    async def _flush(cls, stages: Sequence[Transformer[Any, Any]]) -> list[Any]:
        """Every stage's ``end``, in order, each one's output through those after it."""
        out: list[Any] = []
        for index, stage in enumerate(stages):
            tail = await stage.end()
            if tail:
                out += await cls._push(stages[index + 1 :], tail)
        return out

    async def _close_reading(self) -> None:
        reading, self._reading = self._reading, None
        if reading is not None:
            await reading.aclose()

    async def aclose(self) -> None:
        """Stop: close the source being read, then the upstream."""
        self._phase = _DONE
        try:
            await self._close_reading()
        finally:
            await self._upstream.aclose()


class Puller:
    """What a :class:`~cuca.stream.ResponseStream` reads: ``pull`` returns the next
    non-empty batch, and raises ``trio.EndOfChannel`` once the turn has no more.

    It never raises the error that ended a turn: it records it on the turn's state (the
    first one wins), closes what it reads, and ends; the stream then raises it. Whoever
    stops early closes it (:meth:`aclose`), which closes the source it was reading
    (and with it the response).
    """

    def __init__(self, batches: Batches, state: TurnState) -> None:
        self._batches = batches
        self._state = state
        self._done = False
        self.deadline: tuple[float, Exception] | None = None

    def set_deadline(self, when: float, error: Exception) -> None:
        """End the turn with ``error`` if it is still running at trio time ``when``."""
        self.deadline = (when, error)

    async def pull(self) -> Batch:
        if self._done:
            raise trio.EndOfChannel
        try:
            if self.deadline is None:
                return await self._batches.__anext__()
            with trio.move_on_at(self.deadline[0]):
                return await self._batches.__anext__()
            self._state.fail(self.deadline[1])
        except (StopAsyncIteration, UpstreamFailed):
            pass
        except Exception as exc:
            self._state.fail(exc)
        await self.aclose()
        raise trio.EndOfChannel

    async def aclose(self) -> None:
        self._done = True
        await self._batches.aclose()


# -- building a turn ------------------------------------------------------------------


class _Unit:
    """Stages that share a task (or the consumer's pull): built-in points, or one actor."""

    def __init__(self, names: list[str], built: list[Built]) -> None:
        self.names = names
        self.built = built
        self.actor: Stage[Any, Any] | None = None
        self.check: tuple[Point[Any, Any], str] | None = None  # for what reads its output

    def segment(self, upstream: Batches) -> Segment:
        """The unit's built-in points as one segment (a second source nests one more)."""
        head: list[Transformer[Any, Any]] = []
        before: list[Transformer[Any, Any]] = []
        source: Source[Any, Any] | None = None
        for stage in self.built:
            if isinstance(stage, Source):
                if source is not None:
                    upstream = Segment(upstream, before, source, head)
                before, source, head = head, stage, []
            elif stage.new is not None:
                head.append(stage.new())
        if source is None:
            return Segment(upstream, head)
        return Segment(upstream, before, source, head)


def _units(
    stages: Sequence[tuple[str, Built | Stage[Any, Any]]],
    fused: bool,
) -> list[_Unit]:
    units: list[_Unit] = []
    for index, (name, run) in enumerate(stages):
        if isinstance(run, Transform | Source):
            if not fused and isinstance(run, Transform) and run.new is None:
                continue  # nothing to do this turn: no task for it
            if fused and units and units[-1].actor is None:
                units[-1].names.append(name)
                units[-1].built.append(run)
            else:
                units.append(_Unit([name], [run]))
            continue
        unit = _Unit([name], [])
        unit.actor = run
        following = stages[index + 1][0] if index + 1 < len(stages) else None
        point = POINTS.get(following) if following is not None else None
        nxt = stages[index + 1][1] if index + 1 < len(stages) else None
        if point is not None and isinstance(nxt, Transform | Source):
            unit.check = (point, name)
        units.append(unit)
    return units


def unit_names(
    stages: Sequence[tuple[str, Built | Stage[Any, Any]]], fused: bool = True
) -> tuple[tuple[str, ...], ...]:
    """The stage names each unit runs (a task, or the consumer's pull for the last
    run of built-in points when ``fused``)."""
    return tuple(tuple(unit.names) for unit in _units(stages, fused))


def start(
    stages: Sequence[tuple[str, Built | Stage[Any, Any]]],
    state: TurnState,
    first: Any,
    *,
    fused: bool = True,
    buffer: int = DEFAULT_BUFFER,
) -> tuple[Callable[[], Awaitable[None]] | None, Puller]:
    """The turn that starts with ``first`` (a one-item batch into the first stage): the
    tasks it needs, as one function to run in a nursery (``None`` when it needs none),
    and the :class:`Puller` its consumer reads. Errors are recorded on ``state``, never
    raised; the caller sets ``state.finished`` once the tasks have ended."""
    units = _units(stages, fused)
    tasks: list[tuple[str, Callable[[], Awaitable[None]]]] = []
    first_send, receive = trio.open_memory_channel[Batch](1)
    first_send.send_nowait([first])
    first_send.close()
    upstream: Batches = _Input(receive, state)
    for index, unit in enumerate(units):
        if fused and unit.actor is None and index == len(units) - 1:
            return _background(tasks), Puller(unit.segment(upstream), state)
        send, next_receive = trio.open_memory_channel[Batch](buffer)
        if unit.actor is not None:
            task = partial(_run_actor, unit.actor, receive, send, state)
        else:
            task = partial(_run_segment, unit.segment(upstream), send, state)
        tasks.append(("+".join(unit.names), task))
        receive = next_receive
        upstream = _Input(next_receive, state, unit.check)
    return _background(tasks), Puller(upstream, state)


def _background(
    tasks: list[tuple[str, Callable[[], Awaitable[None]]]],
) -> Callable[[], Awaitable[None]] | None:
    if not tasks:
        return None

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            for name, task in tasks:
                nursery.start_soon(task, name=name)

    return run


async def _run_segment(
    segment: Segment, send: trio.MemorySendChannel[Batch], state: TurnState
) -> None:
    """A unit of built-in points as a task: every batch of ``segment`` into ``send``."""
    async with send:  # closed once an error is recorded
        try:
            async with aclosing(segment):
                async for batch in segment:
                    await send.send(batch)
        except trio.BrokenResourceError:
            pass  # what reads it stopped (it finished, or failed): end quietly
        except Exception as exc:
            state.fail(exc)


async def _run_actor(
    stage: Stage[Any, Any],
    receive: trio.MemoryReceiveChannel[Batch],
    send: trio.MemorySendChannel[Batch],
    state: TurnState,
) -> None:
    """A user stage as a task. It gets a clone of ``send``: the channel ends only once
    the clone is closed and, after an error is recorded, ``send`` itself."""
    with receive:
        async with send:
            clone = send.clone()
            try:
                await stage(receive, clone)
            except trio.BrokenResourceError:
                pass
            except Exception as exc:
                state.fail(exc)
            finally:
                clone.close()


def as_actor(stage: Built) -> Stage[Any, Any]:
    """A built-in point as an actor between two channels, as actors mode runs it (to test
    it, or to drive it by hand): ``await as_actor(stage)(receive, send)``. Unlike in a
    turn, its error is raised."""

    async def actor(
        receive: trio.MemoryReceiveChannel[Batch], send: trio.MemorySendChannel[Batch]
    ) -> None:
        unit = _Unit(["stage"], [stage])
        state = TurnState()
        async with send, aclosing(unit.segment(_Input(receive, state))) as segment:
            async for batch in segment:
                await send.send(batch)

    return actor
