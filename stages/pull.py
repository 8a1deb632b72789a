"""The consumer's end of a turn: the last chain of built-in stages, run by the consumer's
own task as it asks for items.

A channel hop costs a task switch per batch; the last one, between the turn and its
consumer, is paid on every network read. So the last run of chained stages (all of
them, in a turn without user stages) is not given a task: the consumer's task runs it
when it wants the next batch. If that chain holds a source (the transport, the engine),
the consumer pulls one batch from it (one network read, one wake-up from the engine
thread) and pushes it through the stages after it (SSE parse, decode, chunk hooks):
per read, no channel hand-off at all, as in a hand-written loop. Otherwise the chain is
fed by the channel of the user stage before it, one batch per pull.

A :class:`Puller` never raises the error that ended a turn: it records it on the
turn's :class:`~cuca.turn.TurnState` (the first one wins), stops, and hands out the
items produced before it; the stream then raises it. Whoever stops pulling early closes
the puller (:meth:`Puller.aclose`), which closes the source (and with it the response).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

import trio

from cuca.errors import TransportError
from cuca.turn import TurnState

from .chain import Chained, Collector, Sink, StopInput, open_chain

__all__ = ["ChainPuller", "ChannelPuller", "Puller", "Upstream", "UpstreamFailed"]

Upstream = Callable[[], Awaitable["Sequence[Any] | None"]]
"""The next input batch of the last chain, ``None`` once there is none; raises
:class:`UpstreamFailed` when what fed the chain ended in an error."""


class UpstreamFailed(Exception):
    """What fed the last chain failed (or was cancelled): the turn's error is recorded by
    the task that failed, and the chain ends quietly."""


class Puller:
    """What a :class:`~cuca.stream.ResponseStream` reads: ``pull`` returns the next
    non-empty batch, and raises ``trio.EndOfChannel`` once the turn has no more."""

    deadline: tuple[float, Exception] | None = None

    def set_deadline(self, when: float, error: Exception) -> None:
        """End the turn with ``error`` if it is still running at trio time ``when``
        (the stages this puller runs; the client bounds the turn's tasks)."""
        self.deadline = (when, error)

    async def pull(self) -> Sequence[Any]:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Stop early: close what is still open."""


class ChannelPuller(Puller):
    """The end of a turn whose last stage is a user's actor: its channel."""

    def __init__(self, receive: trio.MemoryReceiveChannel[Sequence[Any]]) -> None:
        self._receive = receive

    async def pull(self) -> Sequence[Any]:
        try:
            return await self._receive.receive()
        except trio.ClosedResourceError:
            raise trio.EndOfChannel from None

    async def aclose(self) -> None:
        self._receive.close()


class ChainPuller(Puller):
    """The last chain of a turn, run by the consumer's task.

    ``stages`` are chained; ``upstream`` gives their input batches. When ``head`` wraps
    the chain's first sink (a check of what a user stage sent), it is applied to what
    ``upstream`` gives.
    """

    def __init__(
        self,
        stages: Sequence[Chained[Any, Any]],
        upstream: Upstream,
        state: TurnState,
        head: Callable[[Sink[Any]], Sink[Any]] | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self._state = state
        self._upstream = upstream
        self._on_stop = on_stop
        self._out: Collector[Any] = Collector()
        at = max((i for i, stage in enumerate(stages) if stage.source), default=None)
        self._after = open_chain(stages[at + 1 :] if at is not None else stages, self._out)
        self._source = None if at is None else stages[at].source
        self._into: Collector[Any] = Collector()
        self._before = self._after if at is None else open_chain(stages[:at], self._into)
        if head is not None:
            self._before = head(self._before)
        self._reading: AsyncGenerator[Sequence[Any], None] | None = None
        self._input_ended = False
        self._done = False
        self._interrupted = False
        self._waiting = False

    async def pull(self) -> Sequence[Any]:
        while True:
            items = self._out.take()
            if items:
                return items
            if self._done:
                if self._interrupted:
                    raise TransportError("the turn's read was cancelled: its response is closed")
                raise trio.EndOfChannel
            try:
                if self.deadline is None:
                    await self._step()
                else:
                    await self._step_within(*self.deadline)
            except UpstreamFailed:
                await self._stop()
            except Exception as exc:
                self._state.fail(exc)
                await self._stop()
            except BaseException:
                if not self._waiting:  # cancelled mid-read: the source is gone
                    self._done = self._interrupted = True
                raise

    async def _step_within(self, when: float, error: Exception) -> None:
        with trio.move_on_at(when) as scope:
            await self._step()
        if scope.cancelled_caught:
            self._state.fail(error)
            await self._stop()

    async def _step(self) -> None:
        """One move: a batch from the source through the rest of the chain, or the next
        input batch into the chain, or, at the end of the input, closing the chain."""
        reading = self._reading
        if reading is not None:
            try:
                produced = await reading.__anext__()
            except StopAsyncIteration:
                self._reading = None
                return
            try:
                await self._after.send(produced)
            except StopInput:  # the decoder has what it wants: hang up, end normally
                await self._close_source()
                self._input_ended = True
            return
        if not self._input_ended:
            self._waiting = True  # for a user stage's batch: a cancel here loses nothing
            batch = await self._upstream()
            self._waiting = False
            if batch is None:
                self._input_ended = True
                if self._source is not None:
                    await self._before.aclose()  # the stages before the source end
            else:
                try:
                    await self._before.send(batch)
                except StopInput:
                    self._input_ended = True
            inputs = self._into.take()
            if inputs and self._source is not None:
                self._reading = self._source(inputs)
            return
        await self._after.aclose()
        await self._stop()

    async def _close_source(self) -> None:
        reading, self._reading = self._reading, None
        # a source another task is reading is closed by trio once that task lets go of it
        if reading is not None and not getattr(reading, "ag_running", False):
            await reading.aclose()

    async def _stop(self) -> None:
        self._done = True
        self._input_ended = True
        if self._on_stop is not None:
            self._on_stop()
        await self._close_source()

    async def aclose(self) -> None:
        await self._stop()
