"""The engine's two stages: generation in a worker thread, then output parsing.

``engine`` takes the request, waits for the model (one turn at a time per model), and
runs the blocking generation loop in a worker thread (``trio.to_thread.run_sync``).
The thread hands each token's text to a :class:`_Relay`, which batches everything
produced since the last send into one list, so the per-token cost is a list append.
The relay is bounded: when the consumer falls behind, the thread waits.

``output_parse`` feeds those pieces to an :class:`~cuca.engine.output.OutputParser`
and, at the end, sets ``ctx.summary`` with the exact usage.

Between the two stages travel the records of :mod:`~cuca.engine.records`. This module
builds the stages from a model; the model knows nothing of the stages.

Cancellation: when the turn's nursery is cancelled (the consumer dropped the stream),
the relay's pump sets the stop flag, the loop stops before its next token (a prefill
stops at its next graph node) and the thread returns; the tokens already evaluated stay
in the K/V cache for the next turn. The thread is never abandoned: the model is not
touched by anyone else until it returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import trio

from cuca.stages.context import Stage, TurnContext
from cuca.types import TokenUsage, TurnSummary, UnifiedRequest

from .output import Item, OutputParser, new_call_id
from .records import TokenSink, TurnEnd, TurnStart

__all__ = [
    "Generator",
    "engine_stage",
    "output_parse_stage",
    "turn_stages",
]

RELAY_LIMIT = 512
"""Token pieces the relay holds before the generating thread waits for the consumer."""


class Generator(Protocol):
    """A model's blocking generation loop (``LocalModel`` implements it).

    ``turn_lock`` queues the turns of one model, in trio.
    """

    @property
    def turn_lock(self) -> trio.Lock: ...

    def generate(self, request: UnifiedRequest, sink: TokenSink) -> TurnEnd: ...


class _Relay:
    """Carries token pieces from the worker thread to the trio task, in batches."""

    def __init__(self, limit: int = RELAY_LIMIT) -> None:
        self.stop_flag = threading.Event()
        self._trio_token = trio.lowlevel.current_trio_token()
        self._limit = limit
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._items: list[Any] = []
        self._wake_scheduled = False
        self._finished = False
        self._ready = trio.Event()

    # -- worker thread side --------------------------------------------------------

    def start(self, start: TurnStart) -> None:
        self._put(start)

    def token(self, text: str) -> None:
        self._put(text)

    def stopped(self) -> bool:
        if self.stop_flag.is_set():
            return True
        try:
            trio.from_thread.check_cancelled()
        except trio.Cancelled:
            # The host task will raise its own Cancelled once the thread returns; here
            # it only means "stop generating".
            self.stop_flag.set()
            return True
        return False

    def _put(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)
            self._schedule_wake()
            while len(self._items) >= self._limit and not self.stopped():
                self._drained.wait(timeout=0.05)

    def _schedule_wake(self) -> None:
        if not self._wake_scheduled:
            self._wake_scheduled = True
            self._trio_token.run_sync_soon(self._wake)

    # -- trio side -----------------------------------------------------------------

    def _wake(self) -> None:
        self._ready.set()

    def finish(self) -> None:
        """The thread has returned: let the pump send what is left and end."""
        with self._lock:
            self._finished = True
        self._ready.set()

    async def pump(self, send: trio.MemorySendChannel[Any]) -> None:
        """Send every batch the thread produces until :meth:`finish`."""
        try:
            while True:
                await self._ready.wait()
                with self._lock:
                    self._ready = trio.Event()
                    self._wake_scheduled = False
                    items, self._items = self._items, []
                    finished = self._finished
                    self._drained.notify_all()
                if items:
                    await send.send(items)
                if finished:
                    return
        except trio.BrokenResourceError:
            pass  # nobody listens any more: stop generating, quietly
        finally:
            self.stop_flag.set()
            with self._lock:
                self._drained.notify_all()


async def _run_turn(
    generator: Generator, request: UnifiedRequest, send: trio.MemorySendChannel[Any]
) -> TurnEnd:
    """Generate for ``request`` in a worker thread, relaying its pieces to ``send``."""
    relay = _Relay(RELAY_LIMIT)
    error: Exception | None = None
    end: TurnEnd | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.pump, send)
        try:
            end = await trio.to_thread.run_sync(
                generator.generate, request, relay, abandon_on_cancel=False
            )
        except Exception as exc:
            error = exc
        finally:
            relay.finish()
    if error is not None:
        raise error
    assert end is not None
    return end


async def engine_stage(
    generator: Generator,
    receive: trio.MemoryReceiveChannel[Any],
    send: trio.MemorySendChannel[Any],
) -> None:
    """The ``engine`` stage: each request in, its token pieces out (see module doc).

    Items that are not requests pass through unchanged.
    """
    async with send:
        async for batch in receive:
            for item in batch:
                if not isinstance(item, UnifiedRequest):
                    await send.send([item])
                    continue
                async with generator.turn_lock:
                    end = await _run_turn(generator, item, send)
                await send.send([end])


async def output_parse_stage(
    ctx: TurnContext,
    receive: trio.MemoryReceiveChannel[Any],
    send: trio.MemorySendChannel[Any],
    id_factory: Callable[[], str] = new_call_id,
) -> None:
    """The ``output_parse`` stage: token pieces in, lists of blocks and errors out.

    Sets ``ctx.summary`` from the :class:`TurnEnd`. Items it does not know pass through.
    """
    parser: OutputParser | None = None
    token_ends: list[int] = []
    offset = 0
    async with send:
        async for batch in receive:
            out: list[Item | Any] = []
            for item in batch:
                if isinstance(item, str) and parser is not None:
                    out += parser.feed(item)
                    offset += len(item)
                    token_ends.append(offset)
                elif isinstance(item, TurnStart):
                    parser = OutputParser(
                        item.output_format,
                        thinking_enabled=item.thinking_enabled,
                        id_factory=id_factory,
                    )
                    token_ends, offset = [], 0
                elif isinstance(item, TurnEnd) and parser is not None:
                    out += parser.feed(item.tail)
                    if token_ends:
                        token_ends[-1] += len(item.tail)
                    out += parser.close()
                    ctx.summary = _summary(item, parser.reasoning_token_count(token_ends))
                    parser = None
                else:
                    out.append(item)
            if out:
                await send.send(out)
        if parser is not None:  # the engine failed mid-turn: flush what was held back
            rest = parser.close()
            if rest:
                await send.send(rest)


def _summary(end: TurnEnd, reasoning_tokens: int | None) -> TurnSummary:
    cache = end.prompt_cache_usage
    usage = TokenUsage(
        prompt_tokens=cache.read_tokens + cache.write_tokens,
        completion_tokens=end.completion_tokens,
        reasoning_tokens=reasoning_tokens,
    )
    return TurnSummary(usage=usage, prompt_cache_usage=cache, finish_reason=end.finish_reason)


def turn_stages(generator: Generator, ctx: TurnContext) -> list[tuple[str, Stage]]:
    """The named ``engine`` and ``output_parse`` stages of one turn on ``generator``
    (a :class:`~cuca.engine.LocalModel`)."""

    async def engine(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        await engine_stage(generator, receive, send)

    async def output_parse(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        await output_parse_stage(ctx, receive, send)

    return [("engine", engine), ("output_parse", output_parse)]
