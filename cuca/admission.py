"""Admission: what a turn asks for before its request goes out, and gives back when it
ends, however it ends.

Two small protocols let features outside the core take part in a turn without the
core knowing them:

- a :class:`TurnGate` (a rate limiter, a budget) admits a turn, possibly after waiting,
  or refuses it by raising; the :class:`Ticket` it returns sees the status and headers
  of every attempt of the request (a 429 the client's retry absorbed too), may hold a
  resend back, and is settled once the turn has ended (``ok``, ``error`` or
  ``cancelled``): a dropped stream never keeps its permit;
- a :class:`TurnReplay` (the response cache) may answer a turn from what it kept: the
  stored blocks then flow through the chunk hooks as a stream, and nothing is sent.

The client puts three small actors in a turn that has either: ``admission`` right after
``request_hooks`` (the request as the plugins left it: a cache lookup, then every
gate), ``response_head`` after ``transport`` (headers to the tickets) and ``replay``
right after ``decode`` (or the engine's ``output_parse``: records a live turn's blocks,
or replays a hit, so every user stage after it and the chunk hooks see the replay).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import trio

from .errors import CucaError
from .plugins import BudgetWarning, TurnOutcome
from .turn import EndOfTurn, TurnState
from .types import Block, TurnSummary, UnifiedRequest

if TYPE_CHECKING:
    from cuca.stages.pipeline import Insertion

    from .stream import ResponseStream

__all__ = [
    "Counter",
    "Replay",
    "Ticket",
    "TurnAdmission",
    "TurnGate",
    "TurnReplay",
    "admitted",
    "estimate_tokens",
]

CHARS_PER_TOKEN = 4


def estimate_tokens(request: UnifiedRequest) -> int:
    """A request's prompt tokens, estimated without a tokenizer: its text (messages,
    tool calls and results, tool definitions) over :data:`CHARS_PER_TOKEN`, rounded up;
    an image counts 1000 tokens."""
    import json

    from .types import ImageBase64, Text, Thinking, ToolCall, ToolResult

    chars = 0
    for message in request.messages:
        for block in message.content:
            if isinstance(block, Text | Thinking):
                chars += len(block.text)
            elif isinstance(block, ToolResult):
                chars += len(block.output)
            elif isinstance(block, ToolCall):
                chars += len(block.name) + len(json.dumps(dict(block.arguments)))
            elif isinstance(block, ImageBase64):
                chars += 1000 * CHARS_PER_TOKEN
    for tool in request.tools:
        schema = json.dumps(dict(tool.input_schema))
        chars += len(tool.name) + len(tool.description) + len(schema)
    return -(-chars // CHARS_PER_TOKEN)


async def estimated(request: UnifiedRequest) -> int:
    """:func:`estimate_tokens` as a :data:`Counter`."""
    return estimate_tokens(request)

def _counted_once(count: Counter) -> Counter:
    """``count``, remembering the last request it counted: a turn's gates (a limiter's
    ``input_tokens_per_minute``, a budget) share one count, where a backend's count is
    a request of its own (Anthropic, Gemini)."""
    last: list[tuple[UnifiedRequest, int]] = []

    async def counted(request: UnifiedRequest) -> int:
        if last and last[0][0] is request:
            return last[0][1]
        tokens = await count(request)
        last[:] = [(request, tokens)]
        return tokens

    return counted


SETTLE_TIMEOUT = 10.0
"""Seconds a cancelled turn may spend giving its permits back (shielded from the
cancellation) before it gives up on a store that does not answer."""

REPLAY_BATCH = 32
"""Blocks per batch of a replayed turn."""


class Ticket(Protocol):
    """A turn's permit from one :class:`TurnGate`.

    A ticket may also have ``async def on_resend(self) -> None``, awaited when the
    transport is about to send the request again after a failed attempt: it may wait
    (the rate limiter holds the resend until its pause is over)."""

    async def on_head(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        """An attempt's status and headers, as soon as they arrive (HTTP turns): each
        non-2xx answer the transport retries or gives up on, then the 2xx one."""
        ...

    async def settle(self, end: TurnOutcome) -> Sequence[BudgetWarning] | None:
        """Called once when the turn has ended, with how it ended; returns what the
        turn's observers are to be told (a budget's warnings), or ``None``."""
        ...


Counter = Callable[[UnifiedRequest], Awaitable[int]]
"""Counts a request's prompt tokens: the client's ``count_tokens`` (exact on the local
engine, llama.cpp, Anthropic and Gemini, tiktoken's estimate for the OpenAI family),
falling back to :func:`estimate_tokens` when the backend cannot count."""


@runtime_checkable
class TurnGate(Protocol):
    """Admits turns: :meth:`admit` returns once the turn may go (it may wait, in a
    cancel scope of the turn) or raises a :class:`~cuca.errors.CucaError` that ends it.
    ``count`` counts the request's prompt tokens, for a gate that needs them (it may
    cost a request to the backend: call it only then)."""

    async def admit(self, request: UnifiedRequest, count: Counter) -> Ticket: ...


@attrs.frozen
class Replay:
    """A kept turn: its blocks (as the provider's decoder produced them, before any
    chunk hook) and what the provider reported about it."""

    blocks: tuple[Block, ...]
    summary: TurnSummary


@runtime_checkable
class TurnReplay(Protocol):
    """Answers turns it has seen before. ``endpoint`` names where the turn would go
    (the base URL, or the pool's URLs)."""

    async def lookup(self, request: UnifiedRequest, endpoint: str | None) -> Replay | None: ...

    async def keep(
        self, request: UnifiedRequest, endpoint: str | None, replay: Replay
    ) -> None: ...


class TurnAdmission:
    """One turn's gates and replay: the actors to insert, then :meth:`settle`."""

    def __init__(
        self,
        gates: Sequence[TurnGate],
        replay: TurnReplay | None,
        endpoint: str | None,
        count: Counter = estimated,
    ) -> None:
        self.gates = gates
        self.count = _counted_once(count)  # every gate of the turn, one count
        self.replay = replay
        self.endpoint = endpoint
        self.tickets: list[Ticket] = []
        self.request: UnifiedRequest | None = None
        self.hit: Replay | None = None
        self.blocks: list[Block] = []
        self.clean = True
        self.summary: TurnSummary | None = None
        self.settled = False
        self.failure: BaseException | None = None
        self.warnings: list[BudgetWarning] = []

    async def answered(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        """A non-2xx attempt (:class:`cuca.stages.http.Attempts`): to every ticket."""
        for ticket in self.tickets:
            await ticket.on_head(status, headers)

    async def resending(self) -> None:
        """A resend (:class:`cuca.stages.http.Attempts`): every ticket may hold it."""
        for ticket in self.tickets:
            on_resend = getattr(ticket, "on_resend", None)
            if on_resend is not None:
                await on_resend()

    def insertions(self, http: bool) -> list[Insertion[Any]]:
        from cuca.stages.pipeline import after

        stages = [after("request_hooks", self._admit, "admission")]
        if http and self.gates:
            stages.append(after("transport", self._head, "response_head"))
        if self.replay is not None:  # right after the source: user stages see a replay
            stages.append(after("decode" if http else "output_parse", self._replay, "replay"))
        return stages

    async def _admit(
        self, receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            for request in batch:
                self.request = request
                if self.replay is not None:
                    self.hit = await self.replay.lookup(request, self.endpoint)
                    if self.hit is not None:
                        continue  # answered from the cache: nothing goes out
                for gate in self.gates:
                    ticket = await gate.admit(request, self.count)
                    self.tickets.append(ticket)
                    if self.settled:  # the turn ended while the store answered
                        await self._settle_late(ticket)
                await send.send([request])

    async def _settle_late(self, ticket: Ticket) -> None:
        """A ticket that came after the turn was settled (it was cancelled while a
        store's update, which cannot be taken back, was on its way): settled now, so
        its slot and reservation are given back. Its request was never sent: it ends
        as a turn that failed without a response (a budget charges it nothing)."""
        with trio.move_on_after(SETTLE_TIMEOUT) as scope:
            scope.shield = True
            try:
                await ticket.settle(TurnOutcome("error"))
            except CucaError as exc:
                self.failure = self.failure or exc

    async def _head(
        self, receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        from cuca.stages.items import ResponseHead

        async for batch in receive:
            head = batch[0]
            if type(head) is ResponseHead:
                for ticket in self.tickets:
                    await ticket.on_head(head.status, head.headers)
            await send.send(batch)

    async def _replay(
        self, receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            for item in batch:
                if isinstance(item, EndOfTurn):
                    self.summary = item.summary
                elif isinstance(item, CucaError):
                    self.clean = False  # a turn with an error item is not kept
                else:
                    self.blocks.append(item)
            await send.send(batch)
        hit, request = self.hit, self.request
        if hit is None or request is None:
            return
        for start in range(0, len(hit.blocks), REPLAY_BATCH):
            await send.send(list(hit.blocks[start : start + REPLAY_BATCH]))
        await send.send([EndOfTurn(request, hit.summary, cached=True)])

    async def settle(self, state: TurnState, stream: ResponseStream) -> None:
        """Settle every ticket and keep a clean live turn, once (the client calls it when
        the turn has ended, before its observers' ``on_end``, and again when the turn's
        block is left: a no-op then). The first failure is kept in ``failure`` (the
        client raises it when nothing else is being raised), the budgets' warnings in
        ``warnings``. Shielded from a cancellation, within :data:`SETTLE_TIMEOUT`."""
        if self.settled:
            return
        self.settled = True
        response = stream.response
        if state.error is not None:
            end = TurnOutcome("error", error=state.error)
        elif response is not None:
            end = TurnOutcome("ok", response)
        else:
            end = TurnOutcome("cancelled")
        failure: BaseException | None = None
        with trio.move_on_after(SETTLE_TIMEOUT) as scope:
            scope.shield = True
            for ticket in self.tickets:
                try:
                    self.warnings += await ticket.settle(end) or ()
                except CucaError as exc:
                    failure = failure or exc
            keep = self.replay is not None and self.hit is None and self.clean
            if keep and response is not None and self.summary is not None:
                assert self.replay is not None and self.request is not None
                try:
                    replay = Replay(tuple(self.blocks), self.summary)
                    await self.replay.keep(self.request, self.endpoint, replay)
                except CucaError as exc:
                    failure = failure or exc
        self.failure = failure


@asynccontextmanager
async def admitted(
    gate: TurnGate | None, request: UnifiedRequest
) -> AsyncIterator[Callable[[ResponseStream], None]]:
    """A turn run by a service over clients (a :class:`~cuca.FallbackClient`) under
    ``gate``: admitted before the block, settled after it however it is left. The block
    calls the yielded function with the stream it ran, so the settlement sees how the
    turn ended. The prompt is estimated (:func:`estimate_tokens`): the client that will
    answer is not known yet."""
    if gate is None:
        yield lambda stream: None
        return
    ticket = await gate.admit(request, estimated)
    streams: list[ResponseStream] = []
    end = TurnOutcome("cancelled")
    try:
        yield streams.append
        if streams and streams[-1].response is not None:
            end = TurnOutcome("ok", streams[-1].response)
    except Exception as exc:
        end = TurnOutcome("error", error=exc)
        raise
    finally:
        with trio.move_on_after(SETTLE_TIMEOUT) as scope:
            scope.shield = True
            await ticket.settle(end)
