"""The engine's two stages: generation in a worker thread, then output parsing.

``engine`` takes the request, waits for the model (one turn at a time per model), and
runs the blocking generation loop in a worker thread (``trio.to_thread.run_sync``).
The thread hands each token's text to a :class:`_Relay`, which batches everything
produced since the last send into one list, so the per-token cost is a list append.
The relay is bounded: when the consumer falls behind, the thread waits.

``output_parse`` feeds those pieces to an :class:`~cuca.engine.output.OutputParser`
and, at the end, emits the turn's :class:`~cuca.turn.EndOfTurn` with the exact usage.

Both are chained stages (:mod:`cuca.stages.chain`): the relay's pump pushes each batch
straight through the output parser and the hooks to the consumer's channel, so a token's
way from the model's thread to the consumer costs one wake-up and one channel send.

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
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import trio

from cuca.stages.chain import Chained, Sink, Step
from cuca.turn import EndOfTurn
from cuca.types import TokenUsage, TurnSummary, UnifiedRequest

from .output import OutputParser, new_call_id
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
        self.error: Exception | None = None

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

    async def pump(self, send: Sink[Any]) -> None:
        """Send every batch the thread produces until :meth:`finish`. ``send`` runs the
        chained stages after the engine; an error there is kept in ``error`` (and stops
        the generation), so that it leaves the turn unwrapped."""
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
        except Exception as exc:
            self.error = exc
        finally:
            self.stop_flag.set()
            with self._lock:
                self._drained.notify_all()


async def _run_turn(generator: Generator, request: UnifiedRequest, send: Sink[Any]) -> TurnEnd:
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
    error = relay.error or error
    if error is not None:
        raise error
    assert end is not None
    return end


def engine_stage(generator: Generator) -> Chained[UnifiedRequest, Any]:
    """The ``engine`` stage: each request in, then its token pieces (see module doc).

    The request itself goes first, so that ``output_parse`` can end the turn with it.
    """

    class Engine(Step[UnifiedRequest, Any]):
        async def send(self, batch: Sequence[UnifiedRequest], /) -> None:
            for request in batch:
                await self.out.send([request])
                async with generator.turn_lock:
                    end = await _run_turn(generator, request, self.out)
                await self.out.send([end])

    return Chained(Engine)


def output_parse_stage(id_factory: Callable[[], str] = new_call_id) -> Chained[Any, Any]:
    """The ``output_parse`` stage: token pieces in, blocks and errors out, then the
    :class:`~cuca.turn.EndOfTurn` built from the :class:`TurnEnd`."""

    class OutputParse(Step[Any, Any]):
        def __init__(self, out: Sink[Any]) -> None:
            super().__init__(out)
            self.parser: OutputParser | None = None
            self.request: UnifiedRequest | None = None
            self.token_ends: list[int] = []
            self.offset = 0

        async def send(self, batch: Sequence[Any], /) -> None:
            out: list[Any] = []
            parser = self.parser
            for item in batch:
                if isinstance(item, str) and parser is not None:
                    out += parser.feed(item)
                    self.offset += len(item)
                    self.token_ends.append(self.offset)
                elif isinstance(item, TurnStart):
                    parser = self.parser = OutputParser(
                        item.output_format,
                        thinking_enabled=item.thinking_enabled,
                        id_factory=id_factory,
                    )
                    self.token_ends, self.offset = [], 0
                elif isinstance(item, TurnEnd) and parser is not None:
                    out += self._end(parser, item)
                    parser = self.parser = None
                elif isinstance(item, UnifiedRequest):
                    self.request = item
            if out:
                await self.out.send(out)

        def _end(self, parser: OutputParser, end: TurnEnd) -> list[Any]:
            out: list[Any] = parser.feed(end.tail)
            if self.token_ends:
                self.token_ends[-1] += len(end.tail)
            out += parser.close()
            summary = _summary(end, parser.reasoning_token_count(self.token_ends))
            if self.request is not None:
                out.append(EndOfTurn(self.request, summary))
            return out

        async def aclose(self) -> None:
            if self.parser is not None:  # the engine failed mid-turn: flush what was held
                rest = self.parser.close()
                if rest:
                    await self.out.send(rest)
            await self.out.aclose()

    return Chained(OutputParse)


def _summary(end: TurnEnd, reasoning_tokens: int | None) -> TurnSummary:
    cache = end.prompt_cache_usage
    usage = TokenUsage(
        prompt_tokens=cache.read_tokens + cache.write_tokens,
        completion_tokens=end.completion_tokens,
        reasoning_tokens=reasoning_tokens,
    )
    return TurnSummary(usage=usage, prompt_cache_usage=cache, finish_reason=end.finish_reason)


def turn_stages(generator: Generator) -> tuple[Chained[UnifiedRequest, Any], Chained[Any, Any]]:
    """The ``engine`` and ``output_parse`` stages of one turn on ``generator`` (a
    :class:`~cuca.engine.LocalModel`)."""
    return engine_stage(generator), output_parse_stage()
