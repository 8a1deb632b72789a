"""Approvals before a tool runs: granted, denied, timed out, edited and failed, on
every HTTP family over loopback; calls that need no approval are not held behind one
that does; every decision reaches the observers (the session log stores it with the
turn, the trace marks the execute_tool span)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.transcripts import transcript
from support.wire_replies import FAMILIES, Family

from cuca import (
    Approval,
    ApprovalEvent,
    ConfigurationError,
    CucaClient,
    CucaPlugin,
    LoopObserver,
    ProviderEndpoint,
    SessionLog,
    Tool,
    ToolCall,
    ToolResult,
    UnifiedRequest,
)
from cuca.observers.otel import APPROVAL_EVENT, OtelPlugin
from cuca.testing import Reply, open_replay_server

REQUEST = UnifiedRequest.new("m").add_user_message("Book a table in Paris.")


class Events(CucaPlugin):
    """A plugin whose loop observer keeps every approval event."""

    name = "events"

    def __init__(self) -> None:
        self.events: list[ApprovalEvent] = []

    def observe_tools(self, request: UnifiedRequest) -> LoopObserver:
        events = self.events

        class Keep(LoopObserver):
            def approval(self, event: ApprovalEvent) -> None:
                events.append(event)

        return Keep()


async def run_booking(
    family: Family, approve: Any, plugins: tuple[CucaPlugin, ...] = (), **options: Any
) -> tuple[list[str], list[ToolResult], Any]:
    ran: list[str] = []

    def book(city: str) -> str:
        """Book a table."""
        ran.append(city)
        return f"booked in {city}"

    tool = Tool.from_function(book, needs_approval=True)
    call = family.call_reply("book", {"city": "Paris"}, "call_book")
    replies = [call, family.text_reply("Done.")]
    async with open_replay_server(replies) as server:
        client = family.client(server.url, plugins)
        async with client, client.run_tools(REQUEST, [tool], approve=approve, **options) as s:
            results = [item async for item in s if isinstance(item, ToolResult)]
    return ran, results, s


def granted(call: ToolCall) -> Approval:  # sync: runs in a worker thread
    return Approval.allow(by="alice")


async def denied(call: ToolCall) -> Approval:
    return Approval.deny("too expensive", by="bob")


async def never(call: ToolCall) -> bool:
    await trio.sleep_forever()
    raise AssertionError


async def edited(call: ToolCall) -> Approval:
    return Approval.allow(arguments={"city": "Lyon"}, by="carol")


def failing(call: ToolCall) -> bool:
    raise RuntimeError("the approval service is down")


CASES = {
    "granted": (granted, ["Paris"], "booked in Paris", "approved", "alice"),
    "denied": (denied, [], "denied by approver: too expensive", "denied", "bob"),
    "timed_out": (never, [], "denied: no decision within 0.05 s", "timeout", "never"),
    "edited": (edited, ["Lyon"], "booked in Lyon", "edited", "carol"),
    "failed": (
        failing,
        [],
        "denied: the approver failed: RuntimeError: the approval service is down",
        "error",
        "failing",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
async def test_tool_approval_decides_whether_the_tool_runs(family: Family, case: str) -> None:
    approve, should_run, output, outcome, by = CASES[case]
    events = Events()
    # 0.05 s for the approver that never answers; the others have all the time they
    # need (a worker thread may start late on a loaded machine: no verdict on timing)
    timeout = 0.05 if case == "timed_out" else 600
    ran, results, stream = await run_booking(family, approve, (events,), approval_timeout=timeout)
    assert ran == should_run
    assert [r.output for r in results] == [output]
    assert results[0].is_error is (not should_run)
    (event,) = events.events
    assert (event.outcome, event.by, event.call.arguments) == (outcome, by, {"city": "Paris"})
    assert event.seconds >= (0.05 if case == "timed_out" else 0)
    told = [m for m in stream.conversation.messages if m.role.value == "tool"]
    assert told[0].content[0].output == output  # what the model reads
    if case == "edited":  # the model is told what ran
        calls = [b for m in stream.conversation.messages for b in m.content
                 if isinstance(b, ToolCall)]
        assert calls[0].arguments == {"city": "Lyon"} and event.arguments == {"city": "Lyon"}


async def test_tool_approval_without_an_approver_fails_closed() -> None:
    ran, results, _ = await run_booking(FAMILIES[0], None)
    assert ran == []
    assert results[0].output == "denied: book needs approval and the loop has no approver"


async def test_tool_approval_by_risk_asks_only_for_the_calls_it_names() -> None:
    asked: list[ToolCall] = []

    async def approve(call: ToolCall) -> bool:
        asked.append(call)
        return False

    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    tool = Tool.from_function(pay, needs_approval=lambda args: args["amount"] > 100)
    family = FAMILIES[0]
    replies = [family.call_reply("pay", {"amount": 5}), family.call_reply("pay", {"amount": 500}),
               family.text_reply("ok")]
    async with open_replay_server(replies) as server:
        async with family.client(server.url) as client:
            async with client.run_tools(REQUEST, [tool], approve=approve) as stream:
                results = [i.output async for i in stream if isinstance(i, ToolResult)]
    assert results == ["paid 5", "denied by approver"]
    assert [c.arguments for c in asked] == [{"amount": 500}]


async def test_tool_approval_wait_does_not_hold_back_the_other_calls() -> None:
    """OpenAI's recorded parallel calls: GetWeatherArgs needs approval, get_stock_price
    does not; the approver waits until the stock call has run and been streamed."""
    stock_ran = trio.Event()
    order: list[str] = []

    async def approve(call: ToolCall) -> bool:
        await stock_ran.wait()  # would deadlock if the stock call waited for this one
        order.append("approved")
        return True

    async def weather(**arguments: Any) -> str:
        order.append("weather")
        return "rain"

    async def stock(**arguments: Any) -> str:
        order.append("stock")
        stock_ran.set()
        return "227.52"

    tools = [
        Tool("GetWeatherArgs", "Weather.", {"type": "object"}, weather, needs_approval=True),
        Tool("get_stock_price", "Stock.", {"type": "object"}, stock),
    ]
    replies = [Reply(transcript("openai/parallel_tool_calls")), Reply(transcript("openai/text"))]
    async with open_replay_server(replies) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=server.url, api_key="k") as c:
            with trio.fail_after(30):  # a guard against a hang, not a measure
                async with c.run_tools(REQUEST, tools, approve=approve) as stream:
                    results = [i.output async for i in stream if isinstance(i, ToolResult)]
    assert order == ["stock", "approved", "weather"]
    assert results == ["227.52", "rain"]  # streamed as each completed


async def test_tool_approval_is_stored_with_its_turn_in_the_session_log(tmp_path: Path) -> None:
    with SessionLog(tmp_path / "log.db") as log:
        await run_booking(FAMILIES[0], edited, (log,))
        turns = log.turns()
    assert [len(t.approvals) for t in turns] == [1, 0]  # the turn that made the call
    (record,) = turns[0].approvals
    assert record["tool_call_id"] == "call_book" and record["outcome"] == "edited"
    assert record["by"] == "carol" and record["edited_arguments"] == {"city": "Lyon"}
    assert record["arguments"] == {"city": "Paris"} and record["seconds"] >= 0


async def test_tool_approval_marks_the_execute_tool_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    await run_booking(FAMILIES[0], denied, (OtelPlugin(provider),))
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool book"]
    assert span.attributes is not None
    assert span.attributes["cuca.tool.approval.outcome"] == "denied"
    assert span.attributes["cuca.tool.approval.by"] == "bob"
    assert span.attributes["error.type"] == "denied"
    assert [e.name for e in span.events] == [APPROVAL_EVENT]


async def test_tool_approval_timeout_must_be_seconds() -> None:
    async with CucaClient(ProviderEndpoint.OPENAI, base_url="http://127.0.0.1:9", api_key="k") as c:
        with pytest.raises(ConfigurationError, match="approval_timeout"):
            async with c.run_tools(REQUEST, [], approval_timeout=-1):
                pass


async def test_tool_approval_a_yes_after_the_timeout_is_ignored() -> None:
    """docs/tools.md: a sync approver still at its prompt when ``approval_timeout``
    passes is abandoned in its thread: the call is refused at once and its late yes is
    ignored (an approval that waited for it would fail open). The approver answers
    only once the test releases it, after the loop has ended (a loop that waited for it
    would hang, caught by the 600 s guard)."""
    release, answered = threading.Event(), threading.Event()

    def person_at_a_prompt(call: ToolCall) -> bool:
        release.wait(600)  # released when the test is done (600 s: only if it hung)
        answered.set()
        return True

    events = Events()
    try:
        ran, results, _ = await run_booking(
            FAMILIES[0], person_at_a_prompt, (events,), approval_timeout=0.05
        )
        assert not answered.is_set()  # the loop did not wait for the answer
    finally:
        release.set()
    assert ran == []
    assert [r.output for r in results] == ["denied: no decision within 0.05 s"]
    assert [e.outcome for e in events.events] == ["timeout"]


def says_yes(call: ToolCall) -> bool:  # a plain True, from a worker thread
    return True


async def says_no(call: ToolCall) -> bool:
    return False


class Desk:
    """An approver object: its decision carries no ``by``, so its class is recorded."""

    def __call__(self, call: ToolCall) -> Approval:
        return Approval.allow()


class AsyncDesk:
    async def __call__(self, call: ToolCall) -> bool:
        return True


def says_no_plain(call: ToolCall) -> Approval:
    return Approval.deny()


def returns_a_word(call: ToolCall) -> str:
    return "yes"


def only_paris(call: ToolCall) -> bool:  # decides on the call it is given
    return call.arguments == {"city": "Paris"}


FORMS = {
    "by_the_call": (only_paris, ["Paris"], "booked in Paris", "approved", "only_paris"),
    "no_approver": (None, [], "denied: book needs approval and the loop has no approver",
                    "denied", "no approver"),
    "true": (says_yes, ["Paris"], "booked in Paris", "approved", "says_yes"),
    "false": (says_no, [], "denied by approver", "denied", "says_no"),
    "deny_without_reason": (says_no_plain, [], "denied by approver", "denied", "says_no_plain"),
    "object": (Desk(), ["Paris"], "booked in Paris", "approved", "Desk"),
    "async_object": (AsyncDesk(), ["Paris"], "booked in Paris", "approved", "AsyncDesk"),
    # a sync callable that returns a coroutine: awaited, not taken for the answer
    "coroutine": (lambda call: denied(call), [], "denied by approver: too expensive",
                  "denied", "bob"),
    "same_arguments": (lambda call: Approval.allow(arguments={"city": "Paris"}), ["Paris"],
                       "booked in Paris", "approved", "<lambda>"),
    "not_a_decision": (returns_a_word, [],
                       "denied: the approver returned str, not a decision", "error",
                       "returns_a_word"),
}


@pytest.mark.parametrize("form", FORMS, ids=list(FORMS))
async def test_tool_approval_answers_in_every_form_decide_the_call(form: str) -> None:
    """docs/tools.md, Approvals: an approver is sync or async, a function or an object;
    it answers an ``Approval`` or a plain ``True``/``False``; anything else is a refusal.
    A decision without ``by`` records the approver's name; an allow whose arguments are
    the model's own is an approval, not an edit; ``seconds`` is the time it took."""
    approve, should_run, output, outcome, by = FORMS[form]
    events = Events()
    started = trio.current_time()
    ran, results, _ = await run_booking(FAMILIES[0], approve, (events,))
    elapsed = trio.current_time() - started
    assert ran == should_run
    assert [r.output for r in results] == [output]
    (event,) = events.events
    assert (event.outcome, event.by) == (outcome, by)
    assert event.arguments is None
    assert 0 <= event.seconds <= elapsed


@pytest.mark.parametrize(
    ("decision", "outcome"),
    [
        (Approval(True, None, "low risk", "dan"), "approved"),
        (Approval(True, {"city": "Lyon"}, "Paris is full", "dan"), "edited"),
        (Approval.deny("over the limit", by="dan"), "denied"),
    ],
    ids=["approved", "edited", "denied"],
)
async def test_tool_approval_records_the_reason_of_every_decision(
    decision: Approval, outcome: str
) -> None:
    """docs/tools.md: every decision reaches the observers with its ``reason`` (an
    approval's too, not only a denial's); ``Approval.deny()`` is not approved."""
    events = Events()
    await run_booking(FAMILIES[0], lambda call: decision, (events,))
    (event,) = events.events
    assert (event.outcome, event.reason, event.by) == (outcome, decision.reason, "dan")
    assert Approval.deny().approved is False and Approval.allow().approved is True
