"""The engine's two stages: the turn on the engine thread, then output parsing.

``engine`` takes the request, renders and tokenizes it in a worker thread
(``model.prepare``), emits the turn's :class:`GenerationStart` (the request as sent and its
output format, known from the prepared turn: no round trip to the engine thread), and
submits it to the model's engine thread, which runs it beside the model's other turns
(:mod:`~cuca.engine.scheduler`).

The hand-off: the engine thread feeds a :class:`_Relay`, the turn's channel out of the
engine thread. A trio memory channel cannot be sent to from another thread without
blocking that thread (``trio.from_thread.run``), and the engine thread serves every
turn of the model: it must never wait for one consumer. So the relay is the channel
for that one hop: a list under a lock (appending a token's text is the whole cost on
the engine thread), one ``run_sync_soon`` wake-up per batch (not per token), and a bound
(:data:`RELAY_LIMIT`): when it is full the turn sits out the engine's steps until the
consumer catches up (the model's other turns go on). The ``engine`` source is its
receiving end; each wake-up is one batch. Run fused, that batch goes straight through
``output_parse`` and the hooks in the consumer's task; run as actors, the ``engine``
task forwards it into the next memory channel.

``output_parse`` feeds those pieces to an :class:`~cuca.engine.output.OutputParser`
and, at the end, emits the turn's :class:`~cuca.turn.EndOfTurn` with the exact usage.

Between the two stages travel the records of :mod:`~cuca.engine.records`. This module
builds the stages from a model; the model knows nothing of the stages.

Cancellation: when the turn is dropped, a turn still waiting for a sequence is
withdrawn at no cost; a running one gets its stop flag set, and the stage waits
(shielded) until the engine thread has retired it, at its next step (a prefill step
stops at its next graph node). What was evaluated stays in the turn's sequence for the
conversation's next turn.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from typing import Any, Protocol

import trio

from cuca.stages.stage import Source, Transform, Transformer
from cuca.turn import EndOfTurn
from cuca.types import (
    FinishReason,
    PromptCacheUsage,
    TokenUsage,
    ToolCall,
    TurnSummary,
    UnifiedRequest,
)

from .formats import OutputFormat
from .harmony import HarmonyParser
from .output import OutputParser, new_call_id, new_output_parser
from .records import GenerationEnd, GenerationStart, Held, TokenSink

__all__ = [
    "Engine",
    "engine_stage",
    "output_parse_stage",
    "turn_stages",
]

RELAY_LIMIT = 512
"""Token pieces the relay holds before its turn waits for the consumer."""

_NOTHING = PromptCacheUsage(read_tokens=0, write_tokens=0)


class Prepared(Protocol):
    """What the stages read of a prepared turn: how to parse its output."""

    @property
    def output_format(self) -> OutputFormat: ...

    @property
    def thinking_enabled(self) -> bool: ...


class Engine(Protocol):
    """What the stages need from a model (:class:`~cuca.engine.LocalModel` is one).

    ``prepare`` is blocking (it renders and tokenizes) and runs in a worker thread;
    ``submit`` queues the prepared turn and returns a ticket; the engine then calls the
    sink's ``token`` and, exactly once, ``finish`` from its own thread, unless
    ``withdraw(ticket)`` returns true (the turn never started). ``wake`` tells the
    engine that a sink has room again or was stopped.
    """

    def prepare(self, request: UnifiedRequest) -> Prepared: ...

    def submit(self, prepared: Any, sink: TokenSink) -> Any: ...

    def withdraw(self, ticket: Any) -> bool: ...

    def wake(self) -> None: ...


class _Relay:
    """Carries token pieces from the engine thread to the trio task, in batches."""

    def __init__(self, wake_engine: Callable[[], None], limit: int | None = None) -> None:
        self.stop_flag = threading.Event()
        self._wake_engine = wake_engine
        self._trio_token = trio.lowlevel.current_trio_token()
        self._limit = RELAY_LIMIT if limit is None else limit
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self._wake_scheduled = False
        self._result: GenerationEnd | BaseException | None = None
        self._ready = trio.Event()
        self.finished = False  # the engine finished the turn and every piece was taken

    # -- engine thread side ----------------------------------------------------------

    def token(self, text: str) -> None:
        self._put(text)

    def full(self) -> bool:
        return len(self._items) >= self._limit

    def stopped(self) -> bool:
        return self.stop_flag.is_set()

    def finish(self, result: GenerationEnd | BaseException) -> None:
        with self._lock:
            self._result = result
            self._schedule_wake()

    def _put(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)
            self._schedule_wake()

    def _schedule_wake(self) -> None:
        if not self._wake_scheduled:
            self._wake_scheduled = True
            self._trio_token.run_sync_soon(self._wake)

    # -- trio side -------------------------------------------------------------------

    def _wake(self) -> None:
        self._ready.set()

    async def _woken(self) -> None:
        await self._ready.wait()
        with self._lock:
            self._ready = trio.Event()
            self._wake_scheduled = False

    def result(self) -> GenerationEnd:
        """How the turn ended; raises the engine's error if it failed."""
        result = self._result
        if isinstance(result, BaseException):
            raise result
        assert result is not None
        return result

    async def next_batch(self) -> tuple[list[Any], bool]:
        """Wait for the engine thread; what it produced since the last call, and
        whether it has finished the turn."""
        await self._woken()
        with self._lock:
            items, self._items = self._items, []
            done = self._result is not None
        if len(items) >= self._limit:
            self._wake_engine()  # the turn sat out: it has room again
        self.finished = done
        return items, done

    async def wait_result(self) -> None:
        """Wait until the engine has finished the turn (it was told to stop)."""
        while self._result is None:
            await self._woken()


async def _run_turn(engine: Engine, request: UnifiedRequest) -> AsyncGenerator[list[Any], None]:
    """Run ``request`` on ``engine``: its :class:`GenerationStart`, its token pieces as the
    engine produces them, then its :class:`GenerationEnd`. Closed early (the consumer left, a
    later stage failed), the turn is withdrawn or stopped before this returns."""
    prepared = await trio.to_thread.run_sync(engine.prepare, request)
    yield [GenerationStart(prepared.output_format, prepared.thinking_enabled, request)]
    relay = _Relay(engine.wake)
    ticket = engine.submit(prepared, relay)
    try:
        done = False
        while not done:
            items, done = await relay.next_batch()
            if items:
                yield items
    finally:
        if not relay.finished:
            relay.stop_flag.set()
            if engine.withdraw(ticket):
                relay.finish(GenerationEnd(_NOTHING, 0, "cancelled"))
            else:
                with trio.CancelScope(shield=True):
                    await relay.wait_result()
    yield [relay.result()]


def engine_stage(engine: Engine) -> Source[UnifiedRequest, Any]:
    """The ``engine`` stage: each request in, then its records (see module doc), a
    :class:`~cuca.stages.stage.Source`."""

    async def run(batch: Sequence[UnifiedRequest]) -> AsyncGenerator[Sequence[Any], None]:
        for request in batch:
            turn = _run_turn(engine, request)
            async with aclosing(turn):
                async for items in turn:
                    yield items

    return Source(run)


def output_parse_stage(id_factory: Callable[[], str] = new_call_id) -> Transform[Any, Any]:
    """The ``output_parse`` stage: token pieces in, blocks and errors out, then the
    :class:`~cuca.turn.EndOfTurn` built from the :class:`GenerationEnd`."""

    class OutputParse(Transformer[Any, Any]):
        def __init__(self) -> None:
            self.parser: OutputParser | HarmonyParser | None = None
            self.request: UnifiedRequest | None = None
            self.token_ends: list[int] = []
            self.offset = 0
            self.called = False  # the turn's answer holds a tool call

        async def feed(self, batch: Sequence[Any], /) -> list[Any]:
            out: list[Any] = []
            parser = self.parser
            for item in batch:
                if isinstance(item, str) and parser is not None:
                    parsed = parser.feed(item)
                    self.called = self.called or any(isinstance(b, ToolCall) for b in parsed)
                    out += parsed
                    self.offset += len(item)
                    if isinstance(item, Held) and self.token_ends:
                        self.token_ends[-1] = self.offset  # the earlier tokens' text
                    else:
                        self.token_ends.append(self.offset)
                elif isinstance(item, GenerationStart):
                    self.request = item.request
                    parser = self.parser = new_output_parser(
                        item.output_format,
                        thinking_enabled=item.thinking_enabled,
                        id_factory=id_factory,
                    )
                    self.token_ends, self.offset, self.called = [], 0, False
                elif isinstance(item, GenerationEnd) and parser is not None:
                    out += self._end(parser, item)
                    parser = self.parser = None
            return out

        def _end(self, parser: OutputParser | HarmonyParser, end: GenerationEnd) -> list[Any]:
            out: list[Any] = parser.close()
            called = self.called or any(isinstance(item, ToolCall) for item in out)
            summary = _summary(end, parser.reasoning_token_count(self.token_ends), called)
            if self.request is not None:
                out.append(EndOfTurn(self.request, summary))
            return out

        async def end(self) -> list[Any]:
            if self.parser is not None:  # the engine failed mid-turn: flush what was held
                return self.parser.close()
            return []

    return Transform(OutputParse)


FINISH_REASONS: dict[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "context_length": FinishReason.LENGTH,
}
"""The engine's own reasons (:class:`~cuca.engine.records.GenerationEnd`) as finish reasons;
an answer that called a tool and ended by itself is ``TOOL_CALLS``."""


def _summary(end: GenerationEnd, reasoning_tokens: int | None, called: bool) -> TurnSummary:
    cache = end.prompt_cache_usage
    usage = TokenUsage(
        prompt_tokens=cache.read_tokens + cache.write_tokens,
        completion_tokens=end.completion_tokens,
        reasoning_tokens=reasoning_tokens,
    )
    reason = FINISH_REASONS.get(end.finish_reason, FinishReason.OTHER)
    if called and reason is FinishReason.STOP:
        reason = FinishReason.TOOL_CALLS
    return TurnSummary(
        usage=usage,
        prompt_cache_usage=cache,
        finish_reason=reason,
        provider_finish_reason=end.finish_reason,
    )


def turn_stages(model: Engine) -> tuple[Source[UnifiedRequest, Any], Transform[Any, Any]]:
    """The ``engine`` and ``output_parse`` stages of one turn on ``model`` (a
    :class:`~cuca.engine.LocalModel`)."""
    return engine_stage(model), output_parse_stage()
