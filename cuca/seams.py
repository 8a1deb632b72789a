"""A turn with three seams: where the features meet a turn, around its pipeline and
never inside it.

| seam | when | where it runs | what meets the turn there |
|---|---|---|---|
| *before* | once, before the pipeline starts | the task that opens the turn; I/O allowed | every plugin's ``on_request`` in order (a compactor counting with the turn's own backend), the observers' start, the cache lookup, every gate's admission |
| *during* | at fixed places the transport and the runner call | inside the point's own run or the consumer's pull: no stage, no task | each attempt's head, 2xx included, and each resend: the gates' tickets; the transport's bytes: the observers that asked; the backend's blocks: the cache's record; the consumer's items: the observers |
| *after* | once, when the turn has ended, however it ended | the task that ends it, shielded | the gates' tickets settled, a clean live turn kept in the cache, the observers told |

A cache hit chooses a replay source in place of the backend's source: the pipeline of
a hit is ``request_hooks``, ``replay``, ``chunk_hooks``, so the chunk hooks and the
user's stages after the backend's blocks (``after("decode")``) still see its items;
a user stage placed among the points a hit has not (``transport``...) is left out.

The pipeline (:mod:`cuca.stages`) holds only the built-in points and the user's stages:
nothing here is spliced into it, so a fused turn with a rate limiter, a budget, a cache
and observers runs as many tasks as a plain one. The model is httpx's
``Auth.auth_flow``: code around the transport that sees each request and each answer,
never a stage inside the byte stream.
"""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from itertools import groupby, islice
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import trio

from ._nursery import background_nursery
from .admission import (
    SETTLE_TIMEOUT,
    Admission,
    Replay,
    TurnGate,
    TurnReplay,
    estimate_tokens,
    outcome,
)
from .backends import Backend, TurnOptions
from .errors import ContextOverflowError, CucaError, DeadlineExceeded, PluginError
from .observe import Watch, watch
from .plugins import CucaPlugin, overrides
from .recording import Recording
from .stream import ResponseStream
from .turn import EndOfTurn, TurnState
from .types import ModelInfo, TokenCount, TurnSummary, UnifiedRequest

if TYPE_CHECKING:
    from cuca.stages.pipeline import Pipeline
    from cuca.stages.runner import Batch
    from cuca.stages.stage import Built, Source
    from cuca.turn import Insertion

    from .retry import RetryPolicy

__all__ = ["BackendTurns", "Counting", "PreparesTurn", "TurnSeams", "open_turn"]

REPLAY_BATCH = 32
"""Blocks per batch of a replayed turn."""

RECORD_EVERY = 64
"""Items of a live turn set aside before they are put in its recording (the cache's)."""


class Counting(Protocol):
    """What a request hook may count with: the turn's own backend."""

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount: ...

    async def model_info(self, model: str = "") -> ModelInfo: ...


@runtime_checkable
class PreparesTurn(Protocol):
    """A plugin whose request hook counts tokens (a :class:`~cuca.context.Compactor`):
    the *before* seam calls ``prepare_turn`` with the turn's own backend in place of its
    ``on_request``, so it needs no second client to count with."""

    async def prepare_turn(self, request: UnifiedRequest, backend: Counting) -> UnifiedRequest: ...


class TurnSeams:
    """The three seams of one turn on ``backend`` (see the module): ``plugins`` in
    order, ``gates`` admitting it, ``replay`` answering it from what it kept."""

    def __init__(
        self,
        backend: Backend,
        plugins: Sequence[CucaPlugin],
        gates: Sequence[TurnGate],
        replay: TurnReplay | None,
        request: UnifiedRequest,
    ) -> None:
        self.backend = backend
        self.plugins = plugins
        self.admission = Admission(gates, self._count)
        self.replay = replay
        self.watch: Watch | None = watch(plugins, request)
        self.request = request
        self.sent = False
        self.hit: Replay | None = None
        self.recorder = _Recorder()  # the backend's items, for the cache
        self.ended = False
        self.failure: BaseException | None = None

    # -- before ---------------------------------------------------------------------

    async def before(self, request: UnifiedRequest) -> UnifiedRequest:
        """The request as it will go out: the hooks run, the observers started, the
        cache asked, every gate passed (or the error that ends the turn, raised)."""
        request = await self._hooks(request)
        self.request = request
        if self.watch is not None:
            self.watch.request = request
            self.watch.start(request)
        if self.replay is not None:
            self.hit = await self.replay.lookup(request, self.backend.endpoint)
            if self.hit is not None:
                return request  # answered from the cache: no permit, nothing sent
        await self.admission.admit(request)
        self.sent = True
        return request

    async def _hooks(self, request: UnifiedRequest) -> UnifiedRequest:
        for plugin in self.plugins:
            if not isinstance(plugin, PreparesTurn) and not overrides(plugin, "on_request"):
                continue
            try:
                if isinstance(plugin, PreparesTurn):
                    request = await plugin.prepare_turn(request, self.backend)
                else:
                    request = await plugin.on_request(request)
            except ContextOverflowError:
                raise  # a compactor that could not fit the request: the turn's own error
            except Exception as exc:
                raise PluginError.hook_failed(plugin.name, "on_request", exc) from exc
            if not isinstance(request, UnifiedRequest):
                raise PluginError(plugin.name, "on_request must return a request")
        return request

    async def _count(self, request: UnifiedRequest) -> int:
        """The prompt tokens for the gates: the backend's count, else (a backend that
        cannot count, or failed to) the text-length estimate."""
        try:
            return (await self.backend.count_tokens(request)).tokens
        except CucaError:
            return estimate_tokens(request)

    # -- during ---------------------------------------------------------------------

    def pipeline(self, insertions: Sequence[Insertion[Any]], options: TurnOptions) -> Pipeline:
        """The turn's pipeline: the backend's points (or, on a cache hit, the replay
        source in their place) between the hook points, the user's stages placed, and
        the taps of the *during* seam on the points they watch."""
        from cuca.stages.hooks import chunk_hooks_stage
        from cuca.stages.points import CHUNK_HOOKS, REQUEST_HOOKS, TRANSPORT
        from cuca.stages.stage import PASS, tapped

        hooks: dict[Any, Built] = {
            REQUEST_HOOKS: PASS,
            CHUNK_HOOKS: chunk_hooks_stage(self.plugins),
        }
        if self.hit is not None:
            return _replayed(self.backend, hooks, _replay_source(self.hit), insertions)
        heads = self.admission if self.admission.gates else None
        built = {**hooks, **self.backend.stages(options, heads)}
        items = self.backend.items
        if self.replay is not None:
            built[items] = tapped(built[items], self.recorder.record)
        if self.watch is not None and self.watch.wants_raw and TRANSPORT in built:
            built[TRANSPORT] = tapped(built[TRANSPORT], self.watch.raw)
        return _assembled(self.backend.points, built, insertions)

    # -- after ----------------------------------------------------------------------

    async def after(self, state: TurnState, stream: ResponseStream, cancelled: bool) -> None:
        """The turn has ended (or its consumer left): settle the gates' tickets, keep a
        clean live turn, then tell the observers the budget warnings their charge
        crossed and how the turn ended. Once; the first failure of a ticket or of the
        cache is kept in ``failure`` (raised when the turn's block is left, if nothing
        else is being raised)."""
        if self.ended:
            return
        self.ended = True
        response = stream.response
        try:
            await self.admission.settle(outcome(state.error, response, self.sent))
            self.failure = self.admission.failure
            if self.hit is None and response is not None:
                await self._keep()
        finally:
            if self.watch is not None:
                self.watch.finish(state, cancelled, self.admission.warnings)

    async def _keep(self) -> None:
        if self.replay is None or (kept := self.recorder.kept()) is None:
            return
        with trio.move_on_after(SETTLE_TIMEOUT) as scope:
            scope.shield = True
            try:
                await self.replay.keep(self.request, self.backend.endpoint, kept)
            except CucaError as exc:
                self.failure = self.failure or exc


class _Recorder:
    """The *during* seam's record of a live turn, for the cache: the backend's items as
    its decoder gave them. A batch is only set aside (no Python step per item); every
    ``RECORD_EVERY`` items, what was set aside is sorted a run of one type at a time
    (``groupby``): the blocks go into a :class:`~cuca.recording.Recording` (plain
    deltas as runs of strings, so the blocks of a long answer are not held until it
    ends), the end's summary is kept, an error item marks the turn as one not kept."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.blocks = Recording()
        self.summary: TurnSummary | None = None
        self.failed = False

    def record(self, batch: Batch) -> None:
        pending = self.pending
        pending.extend(batch)
        if len(pending) >= RECORD_EVERY:
            self._sort()

    def _sort(self) -> None:
        for cls, run in groupby(self.pending, type):
            if cls is EndOfTurn:
                *_, end = run
                self.summary = end.summary
            elif issubclass(cls, CucaError):
                self.failed = True
            else:
                self.blocks.extend(run)
        self.pending.clear()

    def kept(self) -> Replay | None:
        """What the cache keeps: the blocks and the summary of the turn's end; ``None``
        for a turn with an error item (a malformed tool call) or no end."""
        self._sort()
        return None if self.failed or self.summary is None else Replay(self.blocks, self.summary)


def _assembled(
    points: Sequence[Any], built: dict[Any, Built], insertions: Sequence[Insertion[Any]]
) -> Pipeline:
    from cuca.stages.pipeline import NamedStage, Pipeline

    return Pipeline([NamedStage(point.name, built[point]) for point in points]).extended(
        insertions
    )


def _replayed(
    backend: Backend,
    hooks: dict[Any, Built],
    source: Source[UnifiedRequest, Any],
    insertions: Sequence[Insertion[Any]],
) -> Pipeline:
    """The pipeline of a cache hit: the replay source in place of the backend's points;
    the user's stages among those points are left out (they would see nothing), those
    after the backend's blocks placed after the replay."""
    from cuca.stages.pipeline import NamedStage, Pipeline

    points = backend.points
    cut = points.index(backend.items)
    gone = {point.name for point in points[1:cut]}
    items = backend.items.name
    kept = [
        attrs.evolve(insertion, point="replay") if insertion.point == items else insertion
        for insertion in insertions
        if insertion.point not in gone and (insertion.point, insertion.where) != (items, "before")
    ]
    stages = [
        NamedStage(points[0].name, hooks[points[0]]),
        NamedStage("replay", source),
        *(NamedStage(point.name, hooks[point]) for point in points[cut + 1 :]),
    ]
    return Pipeline(stages).extended(kept)


def _replay_source(hit: Replay) -> Source[UnifiedRequest, Any]:
    """The source of a cache hit: the kept blocks, then the turn's end (``cached``)."""
    from cuca.stages.stage import Source

    async def replay(batch: Sequence[UnifiedRequest]) -> AsyncGenerator[Sequence[Any], None]:
        for request in batch:
            blocks = iter(hit.blocks)
            while chunk := list(islice(blocks, REPLAY_BATCH)):
                yield chunk
            yield [EndOfTurn(request, hit.summary, cached=True)]

    return Source(replay)


class _Nothing:
    """The batches of a turn that ended before its pipeline started: none."""

    def __aiter__(self) -> _Nothing:
        return self

    async def __anext__(self) -> Batch:
        raise StopAsyncIteration

    async def aclose(self) -> None:
        pass


@asynccontextmanager
async def open_turn(
    seams: TurnSeams,
    request: UnifiedRequest,
    *,
    insertions: Sequence[Insertion[Any]] = (),
    options: TurnOptions | None = None,
    fused: bool = True,
    total: float | None = None,
) -> AsyncIterator[ResponseStream]:
    """One turn: the *before* seam in this task, then the pipeline (fused into the
    consumer's pull, or as actors), the *after* seam once it has ended. ``total`` is
    the turn's deadline in seconds, from now. An error of the *before* seam ends the
    turn as a pipeline's would: raised from the stream's iteration."""
    from cuca.stages.runner import Puller

    state = TurnState()
    deadline = None
    if total is not None:
        late = DeadlineExceeded(f"timed out: the turn exceeded its {total} s deadline")
        deadline = (trio.current_time() + total, late)
    background: Callable[[], Awaitable[None]] | None = None
    try:
        try:
            with trio.move_on_at(deadline[0] if deadline else math.inf) as scope:
                request = await seams.before(request)
            if scope.cancelled_caught and deadline is not None:
                state.fail(deadline[1])
        except Exception as exc:
            state.fail(exc)
        if state.error is None:
            pipeline = seams.pipeline(insertions, options or TurnOptions())
            background, puller = pipeline.start(state, request, fused=fused)
            if deadline is not None:
                puller.set_deadline(*deadline)
        else:
            puller = Puller(_Nothing(), state)
    except BaseException as exc:  # cancelled, or no pipeline: nothing was sent
        seams.sent = False
        if isinstance(exc, Exception):
            state.fail(exc)
        nothing = ResponseStream(Puller(_Nothing(), state), state, request)
        await seams.after(state, nothing, cancelled=not isinstance(exc, Exception))
        raise

    async def ended(cancelled: bool) -> None:
        await seams.after(state, stream, cancelled)

    on_items = seams.watch.items if seams.watch is not None else None
    stream = ResponseStream(puller, state, request, ended, on_items)
    failed = False
    try:
        async with background_nursery() as nursery:
            nursery.start_soon(_run, background, state, deadline)
            try:
                yield stream
            finally:
                await stream._close()
    except BaseException:
        failed = True
        raise
    finally:
        await seams.after(state, stream, cancelled=True)  # ended already, mostly
        if seams.failure is not None and not failed:
            raise seams.failure


async def _run(
    background: Callable[[], Awaitable[None]] | None,
    state: TurnState,
    deadline: tuple[float, Exception] | None,
) -> None:
    """Run the tasks of a turn (those its consumer's task does not run), within its
    deadline; then let the consumer see that they have ended. At the deadline the error
    is recorded before the tasks are cancelled, so none takes the cancellation for the
    end of its input."""
    try:
        if background is None:
            return
        if deadline is None:
            await background()
            return
        async with trio.open_nursery() as nursery:

            async def expire() -> None:
                await trio.sleep_until(deadline[0])
                state.fail(deadline[1])
                nursery.cancel_scope.cancel()

            nursery.start_soon(expire)
            await background()
            nursery.cancel_scope.cancel()
    finally:
        state.finished.set()


class BackendTurns:
    """The turns of one backend: what a client runs each turn with (its plugins, gates
    and replay, its stages, its mode and deadline). A pool's members are these too, one
    per server, sharing the pool's connections."""

    def __init__(
        self,
        backend: Backend,
        *,
        plugins: Sequence[CucaPlugin] = (),
        gates: Sequence[TurnGate] = (),
        replay: TurnReplay | None = None,
        stages: Sequence[Insertion[Any]] = (),
        fused: bool = True,
        total: float | None = None,
    ) -> None:
        self.backend = backend
        self.plugins = tuple(plugins)
        self.gates = tuple(gates)
        self.replay = replay
        self.stages = tuple(stages)
        self.fused = fused
        self.total = total

    def seams(self, request: UnifiedRequest) -> TurnSeams:
        """The seams of one turn of ``request``."""
        return TurnSeams(self.backend, self.plugins, self.gates, self.replay, request)

    def pipeline(self, stages: Sequence[Insertion[Any]], options: TurnOptions) -> Pipeline:
        """The pipeline a turn without a cache hit runs (for a look at its shape)."""
        seams = self.seams(UnifiedRequest.new(""))
        return seams.pipeline([*self.stages, *stages], options)

    def generate_stream(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[ResponseStream]:
        """One turn of ``request`` on the backend (see :func:`open_turn`)."""
        options = TurnOptions(retry, dict(headers or {}))
        return open_turn(
            self.seams(request),
            request,
            insertions=[*self.stages, *stages],
            options=options,
            fused=self.fused if fused is None else fused,
            total=self.total,
        )

    async def aclose(self) -> None:
        await self.backend.aclose()
