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

Neither is a stage: a turn meets them at its seams (:mod:`cuca.seams`), the cache
lookup and every gate's :class:`Admission` *before* the pipeline starts, each attempt's
head *during* it, the settlement and the kept entry *after* it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs
import trio

from .errors import CucaError
from .plugins import BudgetWarning, TurnOutcome
from .turn import AttemptHead
from .types import Block, TurnSummary, UnifiedRequest, UnifiedResponse

if TYPE_CHECKING:
    from .stream import ResponseStream

__all__ = [
    "Admission",
    "Counter",
    "Replay",
    "Ticket",
    "TurnGate",
    "TurnReplay",
    "admitted",
    "estimate_tokens",
    "outcome",
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

class Ticket(Protocol):
    """A turn's permit from one :class:`TurnGate`.

    A ticket may also have ``async def on_resend(self) -> None``, awaited when the
    transport is about to send the request again after a failed attempt: it may wait
    (the rate limiter holds the resend until its pause is over)."""

    async def on_head(self, head: AttemptHead) -> None:
        """An attempt's status and headers (and what they say of the server's rate
        limits), as soon as they arrive (HTTP turns): each non-2xx answer the transport
        retries or gives up on, then the 2xx one."""
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
    chunk hook) and what the provider reported about it. A live turn's blocks come as
    the :class:`~cuca.recording.Recording` they were kept in as they arrived, a sequence
    of the blocks whose plain deltas are runs of strings."""

    blocks: Sequence[Block]
    summary: TurnSummary


@runtime_checkable
class TurnReplay(Protocol):
    """Answers turns it has seen before. ``endpoint`` names where the turn would go
    (the base URL, or the pool's URLs)."""

    async def lookup(self, request: UnifiedRequest, endpoint: str | None) -> Replay | None: ...

    async def keep(
        self, request: UnifiedRequest, endpoint: str | None, replay: Replay
    ) -> None: ...


def outcome(
    error: Exception | None, response: UnifiedResponse | None, sent: bool = True
) -> TurnOutcome:
    """How a turn ended, for its tickets and observers: with ``error``, with
    ``response``, or cancelled. A turn whose request never went out (``sent=False``)
    and that did not fail ends as one that failed without a response: a budget charges
    it nothing."""
    if error is not None:
        return TurnOutcome("error", error=error)
    if response is not None:
        return TurnOutcome("ok", response)
    return TurnOutcome("cancelled") if sent else TurnOutcome("error")


class Admission:
    """One turn's tickets from its gates: taken before its request goes out
    (:meth:`admit`), told of every attempt's head and resend, settled once when the turn
    has ended, however it ended (:meth:`settle`). The one admission of a turn, whoever
    runs it: a client's turn (:mod:`cuca.seams`) or a service over clients
    (:func:`admitted`)."""

    def __init__(self, gates: Sequence[TurnGate], count: Counter = estimated) -> None:
        self.gates = tuple(gates)
        self.count = _counted_once(count)  # every gate of the turn, one count
        self.tickets: list[Ticket] = []
        self.settled = False
        self.failure: BaseException | None = None
        self.warnings: list[BudgetWarning] = []

    async def admit(self, request: UnifiedRequest) -> None:
        """Take a ticket from every gate, in order (each may wait, or refuse by raising).
        A refusal, or a cancellation, settles the tickets already taken before it is
        raised: their request never went out."""
        try:
            for gate in self.gates:
                self.tickets.append(await gate.admit(request, self.count))
            # a cancellation that arrived while a store's update was landing (an update is
            # never abandoned: its ticket came back) is taken here, before the request
            # can go out, so the turn settles as never sent and charges nothing
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else None
            await self.settle(outcome(error, None, sent=False))
            raise

    async def head(self, head: AttemptHead) -> None:
        """An attempt's head (the *during* seam): to every ticket."""
        for ticket in self.tickets:
            await ticket.on_head(head)

    async def resending(self) -> None:
        """The request is about to be sent again: every ticket may hold it."""
        for ticket in self.tickets:
            on_resend = getattr(ticket, "on_resend", None)
            if on_resend is not None:
                await on_resend()

    async def settle(self, end: TurnOutcome) -> None:
        """Settle every ticket with ``end``, once (a second call is a no-op). The first
        failure is kept in ``failure``, the budgets' warnings in ``warnings``. Shielded
        from a cancellation, within :data:`SETTLE_TIMEOUT`."""
        if self.settled:
            return
        self.settled = True
        with trio.move_on_after(SETTLE_TIMEOUT) as scope:
            scope.shield = True
            for ticket in self.tickets:
                try:
                    self.warnings += await ticket.settle(end) or ()
                except CucaError as exc:
                    self.failure = self.failure or exc


@asynccontextmanager
async def admitted(
    gate: TurnGate | None, request: UnifiedRequest
) -> AsyncIterator[Callable[[ResponseStream], None]]:
    """A turn run by a service over clients (a :class:`~cuca.FallbackClient`) under
    ``gate``: admitted before the block, settled after it however it is left (the same
    :class:`Admission` as a client's turn). The block calls the yielded function with
    the stream it ran, so the settlement sees how the turn ended. The prompt is
    estimated (:func:`estimate_tokens`): the client that will answer is not known yet."""
    if gate is None:
        yield lambda stream: None
        return
    admission = Admission([gate])
    await admission.admit(request)
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
        await admission.settle(end)
