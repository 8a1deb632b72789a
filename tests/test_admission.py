"""Admission: the one way a turn takes its gates' permits and gives them back (cuca.admission).

The gates here are written for the test: each records what it was asked and told, so a
test sees what a rate limiter or a budget would see of a turn (docs/limits.md: "a turn
is admitted after the request hooks, before its request goes out, and holds its permit
until it ends, however it ends"; docs/architecture.md, a gate)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from decimal import Decimal

import attrs
import pytest
import trio
from trio.testing import MockClock

from cuca import BudgetWarning, ProviderEndpoint, UnifiedRequest, UnifiedResponse
from cuca.admission import (
    CHARS_PER_TOKEN,
    SETTLE_TIMEOUT,
    Admission,
    Counter,
    Ticket,
    admitted,
    estimate_tokens,
    outcome,
)
from cuca.errors import CucaError, RateLimitExceeded, StoreError
from cuca.plugins import TurnOutcome
from cuca.turn import AttemptHead
from cuca.types import (
    ImageBase64,
    MessageRole,
    Text,
    Thinking,
    ToolCall,
    ToolDefinition,
    ToolResult,
    UnifiedMessage,
)

REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("Hello?")
RESPONSE = UnifiedResponse(ProviderEndpoint.OPENAI, "gpt-4o")
WARNING = BudgetWarning("usd", Decimal("0.9"), Decimal("1"), 0.9)


@attrs.define
class Recorded:
    """A ticket that records what the turn told it."""

    name: str
    log: list[str]
    warnings: Sequence[BudgetWarning] | None = None
    fails: CucaError | None = None
    sleeps: float = 0.0
    heads: list[AttemptHead] = attrs.Factory(list)
    ends: list[TurnOutcome] = attrs.Factory(list)

    async def on_head(self, head: AttemptHead) -> None:
        self.heads.append(head)

    async def settle(self, end: TurnOutcome) -> Sequence[BudgetWarning] | None:
        if self.sleeps:
            await trio.sleep(self.sleeps)
        self.ends.append(end)
        self.log.append(f"settle {self.name}")
        if self.fails is not None:
            raise self.fails
        return self.warnings


@attrs.define
class Resending(Recorded):
    """A ticket with the optional ``on_resend`` (a limiter's, that may hold a resend)."""

    resends: int = 0

    async def on_resend(self) -> None:
        self.resends += 1


@attrs.define
class Gate:
    """A gate that admits with ``ticket``, or refuses with ``refuses``, or waits forever."""

    name: str
    log: list[str]
    ticket: Recorded | None = None
    refuses: Exception | None = None
    waits: bool = False
    counts: list[int] = attrs.Factory(list)

    async def admit(self, request: UnifiedRequest, count: Counter) -> Ticket:
        self.log.append(f"admit {self.name}")
        self.counts.append(await count(request))
        if self.waits:
            await trio.sleep_forever()
        if self.refuses is not None:
            raise self.refuses
        assert self.ticket is not None
        return self.ticket


def gates(log: list[str], *names: str) -> list[Gate]:
    return [Gate(name, log, Recorded(name, log)) for name in names]


def tickets(gates: Sequence[Gate]) -> list[Recorded]:
    return [gate.ticket for gate in gates if gate.ticket is not None]


# -- the estimate -------------------------------------------------------------------------


def test_estimate_tokens_is_the_texts_length_over_four_rounded_up() -> None:
    """docs/limits.md: where a backend cannot count, the estimate is the request's text
    length divided by 4, rounded up."""
    assert CHARS_PER_TOKEN == 4
    assert estimate_tokens(UnifiedRequest.new("m")) == 0
    for length, tokens in [(1, 1), (4, 1), (5, 2), (8, 2), (9, 3)]:
        request = UnifiedRequest.new("m").add_user_message("x" * length)
        assert estimate_tokens(request) == tokens, length
    two = UnifiedRequest.new("m").add_user_message("abcd").add_assistant_message("efgh")
    assert estimate_tokens(two) == 2  # every message's text, summed


def test_estimate_tokens_counts_every_kind_of_text_and_an_image_as_1000() -> None:
    """Thinking, tool calls (name and JSON arguments), tool results and the tools'
    definitions are text the model reads; an image counts 1000 tokens."""
    call = ToolCall("c1", "lookup", {"city": "Paris"})
    tool = ToolDefinition("weather", "The weather", {"type": "object"})
    request = (
        UnifiedRequest.new("m")
        .add_message(UnifiedMessage(MessageRole.ASSISTANT, (Thinking("why" * 4), call)))
        .add_message(UnifiedMessage(MessageRole.USER, (ToolResult("c1", "sunny" * 3),)))
        .add_tool(tool)
    )
    chars = (
        12
        + len("lookup") + len(json.dumps({"city": "Paris"}))
        + 15
        + len("weather") + len("The weather") + len(json.dumps({"type": "object"}))
    )
    assert estimate_tokens(request) == math.ceil(chars / 4)
    image = UnifiedRequest.new("m").add_user_message(ImageBase64("image/png", "AAAA" * 100))
    assert estimate_tokens(image) == 1000
    both = UnifiedRequest.new("m").add_user_message([Text("abcd"), ImageBase64("image/png", "")])
    assert estimate_tokens(both) == 1001


# -- admit --------------------------------------------------------------------------------


async def test_admission_takes_a_ticket_from_every_gate_in_order() -> None:
    """docs/limits.md: the gates admit a turn in the order given."""
    log: list[str] = []
    chosen = gates(log, "limiter", "budget")
    admission = Admission(chosen)
    await admission.admit(REQUEST)
    assert log == ["admit limiter", "admit budget"]
    assert admission.tickets == tickets(chosen)
    assert not admission.settled


async def test_admission_counts_a_request_once_for_all_its_gates() -> None:
    """A turn's gates share one count: a backend's count is a request of its own
    (Anthropic, Gemini); a request counted again is a new one."""
    counted: list[UnifiedRequest] = []

    async def count(request: UnifiedRequest) -> int:
        counted.append(request)
        return 7 * len(counted)

    log: list[str] = []
    chosen = gates(log, "limiter", "budget")
    admission = Admission(chosen, count)
    await admission.admit(REQUEST)
    assert counted == [REQUEST]
    assert [gate.counts for gate in chosen] == [[7], [7]]
    other = REQUEST.add_user_message("And?")
    assert await admission.count(other) == 14
    assert await admission.count(other) == 14
    assert counted == [REQUEST, other]


async def test_admission_without_a_counter_estimates_the_prompt() -> None:
    log: list[str] = []
    chosen = gates(log, "budget")
    await Admission(chosen).admit(REQUEST)
    assert chosen[0].counts == [estimate_tokens(REQUEST)]


async def test_admission_refused_gives_back_the_permits_taken_as_never_sent() -> None:
    """A refusal ends the turn before its request goes out: the tickets taken before
    it are settled at once, as a failed turn that sent nothing (a budget charges it
    nothing), the refusal raised, and the gates after it never asked."""
    log: list[str] = []
    refusal = RateLimitExceeded("requests_per_minute", 1.0, "over the limit")
    first, second = gates(log, "first", "second")
    refusing = Gate("refusing", log, refuses=refusal)
    admission = Admission([first, refusing, second])
    with pytest.raises(RateLimitExceeded) as raised:
        await admission.admit(REQUEST)
    assert raised.value is refusal
    assert log == ["admit first", "admit refusing", "settle first"]
    assert first.ticket is not None and first.ticket.ends == [TurnOutcome("error", error=refusal)]
    assert admission.settled


async def test_admission_cancelled_while_waiting_gives_back_the_permits_taken() -> None:
    """A turn cancelled while a gate makes it wait (a limiter's queue) never sent its
    request: the permits already taken are settled as a turn that failed unsent."""
    log: list[str] = []
    (first,) = gates(log, "first")
    admission = Admission([first, Gate("waiting", log, waits=True)])
    with trio.move_on_after(1) as scope:
        await admission.admit(REQUEST)
    assert scope.cancelled_caught
    assert first.ticket is not None and first.ticket.ends == [TurnOutcome("error")]


async def test_admission_cancelled_as_the_last_permit_lands_sends_nothing() -> None:
    """A cancellation that arrives while the last gate's update lands (the update is
    never abandoned) is taken before the request can go out: the turn settles as never
    sent and charges nothing."""
    log: list[str] = []
    chosen = gates(log, "limiter", "budget")
    admission = Admission(chosen)
    with trio.CancelScope() as scope:
        scope.cancel()  # pending: the gates here admit without a checkpoint
        await admission.admit(REQUEST)
    assert scope.cancelled_caught
    assert [ticket.ends for ticket in tickets(chosen)] == [[TurnOutcome("error")]] * 2


# -- during -------------------------------------------------------------------------------


async def test_admission_shows_every_attempts_head_to_every_ticket() -> None:
    log: list[str] = []
    chosen = gates(log, "limiter", "budget")
    admission = Admission(chosen)
    await admission.admit(REQUEST)
    retried, answered = AttemptHead(429, (("retry-after", "1"),)), AttemptHead(200, ())
    await admission.head(retried)
    await admission.head(answered)
    assert [ticket.heads for ticket in tickets(chosen)] == [[retried, answered]] * 2


async def test_admission_resend_reaches_every_ticket_that_listens_for_it() -> None:
    """``on_resend`` is optional on a ticket: those that have it hear each resend."""
    log: list[str] = []
    holding = [Resending("a", log), Resending("b", log)]
    admission = Admission(
        [Gate("a", log, holding[0]), Gate("plain", log, Recorded("plain", log)),
         Gate("b", log, holding[1])]
    )
    await admission.admit(REQUEST)
    await admission.resending()
    await admission.resending()
    assert [ticket.resends for ticket in holding] == [2, 2]


# -- after --------------------------------------------------------------------------------


async def test_admission_settles_every_ticket_once_with_how_the_turn_ended() -> None:
    log: list[str] = []
    chosen = gates(log, "limiter", "budget")
    admission = Admission(chosen)
    await admission.admit(REQUEST)
    ended = TurnOutcome("ok", RESPONSE)
    await admission.settle(ended)
    await admission.settle(TurnOutcome("cancelled"))  # a second call is a no-op
    assert [ticket.ends for ticket in tickets(chosen)] == [[ended], [ended]]
    assert admission.failure is None and admission.warnings == []


async def test_admission_collects_every_budgets_warnings() -> None:
    log: list[str] = []
    other = BudgetWarning("tokens", 90, 100, 0.9)
    chosen = [
        Gate("usd", log, Recorded("usd", log, warnings=[WARNING])),
        Gate("limiter", log, Recorded("limiter", log, warnings=None)),
        Gate("tokens", log, Recorded("tokens", log, warnings=(other,))),
    ]
    admission = Admission(chosen)
    await admission.admit(REQUEST)
    await admission.settle(TurnOutcome("ok", RESPONSE))
    assert admission.warnings == [WARNING, other]


async def test_admission_settles_the_rest_when_a_store_fails_and_keeps_the_first_failure() -> None:
    """docs/store.md: a store that fails ends the turn with ``StoreError``; the other
    tickets are still settled (their permits come back) and the first failure is the
    one the turn raises."""
    log: list[str] = []
    first, second = StoreError("first store down"), StoreError("second store down")
    chosen = [
        Gate("a", log, Recorded("a", log, fails=first)),
        Gate("b", log, Recorded("b", log, warnings=[WARNING])),
        Gate("c", log, Recorded("c", log, fails=second)),
    ]
    admission = Admission(chosen)
    await admission.admit(REQUEST)
    await admission.settle(TurnOutcome("ok", RESPONSE))
    assert log[-3:] == ["settle a", "settle b", "settle c"]
    assert admission.failure is first
    assert admission.warnings == [WARNING]


async def test_admission_settles_a_cancelled_turn_shielded_from_its_cancellation(
    autojump_clock: MockClock,
) -> None:
    """A dropped or cancelled stream never keeps its permit: the settlement runs to its
    end though the turn's scope is cancelled (a store round trip takes time)."""
    log: list[str] = []
    slow = Recorded("slow", log, sleeps=SETTLE_TIMEOUT / 2)
    admission = Admission([Gate("slow", log, slow)])
    await admission.admit(REQUEST)
    with trio.CancelScope() as scope:
        scope.cancel()
        await admission.settle(TurnOutcome("cancelled"))
    assert slow.ends == [TurnOutcome("cancelled")]


async def test_admission_gives_up_on_a_store_that_does_not_answer(
    autojump_clock: MockClock,
) -> None:
    """A settlement waits at most SETTLE_TIMEOUT (10 s) for its tickets, then the turn
    ends without them."""
    log: list[str] = []
    stuck = Recorded("stuck", log, sleeps=math.inf)
    admission = Admission([Gate("stuck", log, stuck)])
    await admission.admit(REQUEST)
    start = trio.current_time()
    await admission.settle(TurnOutcome("ok", RESPONSE))
    assert SETTLE_TIMEOUT == 10.0
    assert trio.current_time() - start == pytest.approx(SETTLE_TIMEOUT)
    assert stuck.ends == []


def test_outcome_names_how_the_turn_ended() -> None:
    """An error, a response, or neither: cancelled if its request went out, a failure
    without a response (charged nothing) if it never did."""
    error = CucaError("failed")
    assert outcome(error, RESPONSE) == TurnOutcome("error", error=error)
    assert outcome(None, RESPONSE) == TurnOutcome("ok", RESPONSE)
    assert outcome(None, None) == TurnOutcome("cancelled")
    assert outcome(None, None, sent=True) == TurnOutcome("cancelled")
    assert outcome(None, None, sent=False) == TurnOutcome("error")


# -- a service's turn ---------------------------------------------------------------------


@attrs.define
class Ran:
    """What ``admitted`` reads of the stream a service ran: its response."""

    response: UnifiedResponse | None


async def test_admitted_without_a_gate_takes_nothing() -> None:
    async with admitted(None, REQUEST) as ran:
        assert ran(Ran(RESPONSE)) is None  # type: ignore[arg-type, func-returns-value]


async def test_admitted_settles_with_the_last_streams_response() -> None:
    """A service over clients (a FallbackClient) tells the gate its turn's answer: the
    last stream it ran, after the ones that failed over."""
    log: list[str] = []
    (gate,) = gates(log, "limiter")
    async with admitted(gate, REQUEST) as ran:
        assert log == ["admit limiter"]
        ran(Ran(None))  # type: ignore[arg-type]
        ran(Ran(RESPONSE))  # type: ignore[arg-type]
    assert gate.ticket is not None and gate.ticket.ends == [TurnOutcome("ok", RESPONSE)]


async def test_admitted_settles_a_turn_without_an_answer_as_cancelled() -> None:
    log: list[str] = []
    (gate,) = gates(log, "limiter")
    async with admitted(gate, REQUEST) as ran:
        ran(Ran(RESPONSE))  # type: ignore[arg-type]
        ran(Ran(None))  # type: ignore[arg-type]
    async with admitted(gate, REQUEST):
        pass
    assert gate.ticket is not None
    assert gate.ticket.ends == [TurnOutcome("cancelled"), TurnOutcome("cancelled")]


async def test_admitted_settles_a_failed_turn_with_its_error_and_raises_it() -> None:
    log: list[str] = []
    (gate,) = gates(log, "limiter")
    failure = CucaError("every client failed")
    with pytest.raises(CucaError) as raised:
        async with admitted(gate, REQUEST) as ran:
            ran(Ran(RESPONSE))  # type: ignore[arg-type]
            raise failure
    assert raised.value is failure
    assert gate.ticket is not None
    assert gate.ticket.ends == [TurnOutcome("error", error=failure)]


async def test_admitted_refused_runs_nothing() -> None:
    log: list[str] = []
    refusal = RateLimitExceeded("requests_per_minute", 1.0, "over the limit")
    ran: list[bool] = []
    with pytest.raises(RateLimitExceeded):
        async with admitted(Gate("refusing", log, refuses=refusal), REQUEST):
            ran.append(True)
    assert ran == []
