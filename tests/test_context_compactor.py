"""The compactor and its strategies: invariants over random conversations, and each
strategy's own behaviour. Counting is a stand-in here (characters / 4 plus 4 a message),
so any conversation can be generated; the real model's counts are in
``test_context_local.py``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.transcripts import transcript

from cuca import (
    CompactionReport,
    Compactor,
    ConfigurationError,
    ContextOverflowError,
    CucaClient,
    CucaPlugin,
    ImageBase64,
    MessageRole,
    ModelInfo,
    ProviderEndpoint,
    Text,
    Thinking,
    TokenCount,
    ToolCall,
    ToolResult,
    TurnObserver,
    UnifiedMessage,
    UnifiedRequest,
)
from cuca.context import (
    ClampMessages,
    ClearToolResults,
    DropOldestTurns,
    SlidingWindow,
    Strategy,
    SummariseOldestTurns,
    TokenTarget,
    layout,
)
from cuca.testing import Reply, open_replay_server


def size(message: UnifiedMessage) -> int:
    chars = 0
    for block in message.content:
        if isinstance(block, Text | Thinking):
            chars += len(block.text)
        elif isinstance(block, ToolCall):
            chars += len(block.name) + len(json.dumps(dict(block.arguments)))
        elif isinstance(block, ToolResult):
            chars += len(block.output)
        elif isinstance(block, ImageBase64):
            chars += 340
    return 4 + chars // 4


class CharCounter:
    """A TokenCounter that counts characters: 4 a message plus a token per 4 characters."""

    def __init__(self, window: int | None = 1000) -> None:
        self.window = window
        self.counts = 0

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount:
        self.counts += 1
        return TokenCount(sum(size(m) for m in request.messages), exact=True, method="chars")

    async def model_info(self, model: str = "") -> ModelInfo:
        return ModelInfo(model, self.window)

    async def tokens(self, request: UnifiedRequest) -> int:
        return (await self.count_tokens(request)).tokens


class FixedSummary:
    """A Summariser that answers every request with the same short text."""

    def __init__(self) -> None:
        self.asked = 0

    async def generate(self, request: UnifiedRequest) -> Any:
        self.asked += 1

        class Done:
            text = "They talked about rivers."

        return Done()


# -- random conversations --------------------------------------------------------------

words = st.text(alphabet="abc xyz", min_size=0, max_size=120)


@st.composite
def conversations(draw: st.DrawFn) -> UnifiedRequest:
    """System (maybe), turns of user text or images, assistant thinking (signed or not),
    tool calls each answered by a Tool message, and a latest user message, maybe with
    the tool loop's current step after it."""
    counter = iter(range(10_000))
    request = UnifiedRequest.new("m")
    if draw(st.booleans()):
        request = request.add_system_message(draw(words))
    for _ in range(draw(st.integers(0, 8))):
        request = request.add_message(_user(draw, next(counter)))
        request = _assistant_steps(draw, request, counter)
    request = request.add_message(_user(draw, next(counter)))
    if draw(st.booleans()):
        request = _assistant_steps(draw, request, counter, final=False)
    return request


def _user(draw: st.DrawFn, n: int) -> UnifiedMessage:
    blocks: list[Any] = [Text(f"u{n}: {draw(words)}")]  # every message its own
    if draw(st.integers(0, 5)) == 0:
        blocks.append(ImageBase64("image/png", "iVBORw0KGgo="))
    return UnifiedMessage(MessageRole.USER, tuple(blocks))


def _assistant_steps(
    draw: st.DrawFn, request: UnifiedRequest, counter: Any, final: bool = True
) -> UnifiedRequest:
    for _ in range(draw(st.integers(0, 2))):
        blocks: list[Any] = []
        if draw(st.booleans()):
            signature = draw(st.sampled_from([None, "sig-" + str(next(counter))]))
            blocks.append(Thinking(f"t{next(counter)}: {draw(words)}", signature=signature))
        calls = [
            ToolCall(f"call_{next(counter)}", "f", {"x": draw(words)})
            for _ in range(draw(st.integers(1, 2)))
        ]
        request = request.add_message(UnifiedMessage(MessageRole.ASSISTANT, (*blocks, *calls)))
        for call in calls:
            request = request.add_tool_result(call.id, draw(words) * draw(st.integers(1, 30)))
    if final and draw(st.booleans()):
        request = request.add_assistant_message(draw(words) * draw(st.integers(1, 20)))
    return request


def all_strategies() -> list[Strategy]:
    return [
        ClearToolResults(keep_last=1),
        ClampMessages(max_chars=80),
        SummariseOldestTurns(FixedSummary(), "m", keep_turns=1),
        DropOldestTurns(),
        SlidingWindow(last=4),
    ]


strategy_lists = st.lists(st.sampled_from(range(5)), unique=True, min_size=1).map(
    lambda picks: [all_strategies()[i] for i in picks]
)


def _blocks(messages: Sequence[UnifiedMessage], kind: type) -> list[Any]:
    return [b for m in messages for b in m.content if isinstance(b, kind)]


def check_invariants(before: UnifiedRequest, after: UnifiedRequest) -> None:
    old, new = before.messages, after.messages
    systems = [m for m in old if m.role is MessageRole.SYSTEM]
    if systems:
        assert new[0] == systems[0]  # the first system message, untouched and first
    users = [m for m in old if m.role is MessageRole.USER]
    assert [m for m in new if m.role is MessageRole.USER][-1] == users[-1]
    calls = {c.id for c in _blocks(new, ToolCall)}
    results = {r.tool_call_id for r in _blocks(new, ToolResult)}
    assert calls == results  # no call without its result, no result without its call
    for message in new:  # a signed thinking block stays with the calls it signed
        signed = [b for b in message.content if isinstance(b, Thinking) and b.signature]
        if signed:
            original = next(m for m in old if signed[0] in m.content)
            assert _blocks([original], ToolCall) == _blocks([message], ToolCall)
            assert _blocks([original], Thinking) == _blocks([message], Thinking)
    kept_thinking = _blocks(new, Thinking)
    kept_users = [m.text() for m in new if m.role is MessageRole.USER]
    for block in kept_thinking:  # a thinking block goes with its turn's user message
        at = next(i for i, m in enumerate(old) if block in m.content)
        asker = next((m for m in reversed(old[:at]) if m.role is MessageRole.USER), None)
        if asker is not None:  # kept, clamped maybe: its head (the tag) stays
            tag = asker.text().split(":", 1)[0] + ":"
            assert any(text.startswith(tag) for text in kept_users)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), strategy_lists, st.integers(10, 1500))
def test_compactor_invariants_hold_over_random_conversations(
    request: UnifiedRequest, strategies: list[Strategy], budget: int
) -> None:
    counter = CharCounter()
    compactor = Compactor(counter, budget=budget, strategies=strategies)
    before = sum(size(m) for m in request.messages)

    async def run() -> None:
        try:
            after = await compactor.on_request(request)
        except ContextOverflowError as error:
            assert error.limit == budget and error.requested is not None
            assert error.requested > budget
            assert "cannot be removed" in error.message
            return
        tokens = sum(size(m) for m in after.messages)
        assert tokens <= budget  # fits, or the turn fails (above)
        check_invariants(request, after)
        if before <= budget:
            assert after is request and after.compaction is None
        else:
            report = after.compaction
            assert report is not None
            assert (report.tokens_before, report.tokens_after, report.budget) == (
                before,
                tokens,
                budget,
            )
            assert report.steps and report.steps[-1].tokens_after == tokens

    trio.run(run)


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_layout_covers_every_message_once(request: UnifiedRequest) -> None:
    pieces = layout(request.messages)
    assert pieces.kept(pieces.turns) == list(range(len(request.messages)))


# -- each strategy ---------------------------------------------------------------------


def tool_conversation(results: int, output: str = "x" * 400) -> UnifiedRequest:
    request = UnifiedRequest.new("m").add_system_message("sys")
    for n in range(results):
        request = request.add_user_message(f"question {n}")
        call = ToolCall(f"c{n}", "lookup", {"n": n})
        request = request.add_message(UnifiedMessage(MessageRole.ASSISTANT, (call,)))
        request = request.add_tool_result(call.id, output)
        request = request.add_assistant_message(f"answer {n}")
    return request.add_user_message("last question")


BIG = TokenTarget(10**9, CharCounter().tokens)


async def test_clear_tool_results_keeps_the_last_pairs_whole() -> None:
    request = tool_conversation(4)
    change = await ClearToolResults(keep_last=2).apply(request, BIG)
    assert change is not None
    outputs = [r.output for r in _blocks(change.request.messages, ToolResult)]
    marker = "[tool result removed by compaction: 400 characters]"
    assert outputs == [marker, marker, "x" * 400, "x" * 400]
    assert change.removed == "2 tool results (800 characters)"
    assert await ClearToolResults(keep_last=2).apply(change.request, BIG) is None  # idempotent


async def test_clamp_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    text = "A" * 50 + "m" * 900 + "Z" * 50
    request = UnifiedRequest.new("m").add_user_message("q").add_assistant_message(text)
    request = request.add_user_message(text)  # the latest user message: never clamped
    change = await ClampMessages(max_chars=100).apply(request, BIG)
    assert change is not None
    clamped = change.request.messages[1].text()
    assert clamped == "A" * 50 + "\n[... 900 characters cut by compaction ...]\n" + "Z" * 50
    assert change.request.messages[2].text() == text
    assert change.removed == "1 block clamped (900 characters)"


async def test_drop_oldest_turns_drops_as_few_as_fit() -> None:
    request = tool_conversation(10)
    counter = CharCounter()
    total = (await counter.count_tokens(request)).tokens
    budget = TokenTarget(total - 150, counter.tokens)
    change = await DropOldestTurns().apply(request, budget)
    assert change is not None
    assert change.removed == "2 oldest turns (8 messages)"  # one turn is ~105 tokens
    assert change.request.messages[1].text() == "question 2"
    assert counter.counts <= 7  # bisection: a handful of counts for ten turns


async def test_drop_oldest_turns_keeps_its_cut_while_the_conversation_fits() -> None:
    counter = CharCounter()
    strategy = DropOldestTurns()
    request = tool_conversation(10)
    total = (await counter.count_tokens(request)).tokens
    budget = TokenTarget(total - 100, counter.tokens, goal=total - 400)
    first = await strategy.apply(request, budget)
    assert first is not None and first.removed == "4 oldest turns (16 messages)"  # to the goal
    grown = request.add_assistant_message("fine").add_user_message("one more")
    again = await strategy.apply(grown, budget)
    assert again is not None and again.removed == first.removed  # the same cut: same prefix
    assert again.request.messages[: len(first.request.messages) - 1] == first.request.messages[:-1]


async def test_sliding_window_keeps_whole_turns_within_the_last_n() -> None:
    request = tool_conversation(5)  # 1 + 5 * 4 + 1 messages
    change = await SlidingWindow(last=9).apply(request, BIG)
    assert change is not None
    texts = [m.text() for m in change.request.messages if m.role is MessageRole.USER]
    assert texts == ["question 3", "question 4", "last question"]
    assert change.removed == "12 messages"


async def test_summarise_is_one_message_reused_while_it_covers_the_same_turns() -> None:
    summariser = FixedSummary()
    strategy = SummariseOldestTurns(summariser, "m", keep_turns=1)
    request = tool_conversation(4)
    first = await strategy.apply(request, BIG)
    again = await strategy.apply(request, BIG)
    assert first is not None and again is not None
    assert first.request == again.request and summariser.asked == 1
    summary = first.request.messages[1]
    assert summary.role is MessageRole.SYSTEM
    assert summary.text() == "Summary of the earlier conversation: They talked about rivers."
    assert [m.text() for m in first.request.messages if m.role is MessageRole.USER] == [
        "question 3",
        "last question",
    ]
    await strategy.apply(tool_conversation(5), BIG)  # one more turn to cover: a new one
    assert summariser.asked == 2


# -- the plugin ------------------------------------------------------------------------


async def test_compactor_leaves_a_request_that_fits_alone() -> None:
    request = tool_conversation(2)
    counter = CharCounter()
    assert await Compactor(counter, budget=10_000).on_request(request) is request
    assert counter.counts == 1


async def test_compactor_fractional_budget_uses_the_models_window() -> None:
    request = tool_conversation(10)
    compactor = Compactor(CharCounter(window=1000), budget=0.5)
    after = await compactor.on_request(request)
    assert after.compaction is not None and after.compaction.budget == 500
    assert after.compaction.tokens_after <= 500
    assert [s.strategy for s in after.compaction.steps][:1] == ["clear_tool_results"]
    unknown = Compactor(CharCounter(window=None), budget=0.5)
    with pytest.raises(ConfigurationError, match="give the budget in tokens"):
        await unknown.on_request(request)


def test_compactor_rejects_a_budget_that_is_not_one() -> None:
    for bad in (0, -3, 1.5, True, "100"):
        with pytest.raises(ConfigurationError, match="budget"):
            Compactor(CharCounter(), budget=bad)  # type: ignore[arg-type]


async def test_compactor_that_cannot_fit_says_what_could_not_be_removed() -> None:
    request = UnifiedRequest.new("m").add_system_message("s" * 400).add_user_message("u" * 400)
    with pytest.raises(ContextOverflowError) as info:
        await Compactor(CharCounter(), budget=50).on_request(request)
    assert info.value.message == (
        "compaction could not fit the request in 50 tokens: 208 remain in the first system "
        "message, the latest user message and what follows it, which cannot be removed "
        "(no strategy removed anything)"
    )


class Watcher(CucaPlugin):
    name = "watcher"

    def __init__(self) -> None:
        self.reports: list[CompactionReport] = []

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        reports = self.reports

        class Seen(TurnObserver):
            def on_compaction(self, report: CompactionReport) -> None:
                reports.append(report)

        return Seen()


async def test_compactor_report_reaches_the_response_and_the_observers() -> None:
    request = tool_conversation(6)
    watcher = Watcher()
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=server.url, api_key="k") as counter:
            compactor = Compactor(counter, budget=120)
            plugins = [compactor, watcher]
            async with CucaClient(
                ProviderEndpoint.OPENAI, base_url=server.url, api_key="k", plugins=plugins
            ) as client:
                done = await client.generate(request)
    report = done.response.compaction
    assert report is not None and not report.exact  # the OpenAI count is an estimate
    assert report.tokens_before > 120 >= report.tokens_after
    assert watcher.reports == [report]
    sent = server.requests[0].json()["messages"]
    assert len(sent) < len(request.messages)


async def test_compactor_overflow_fails_the_turn_with_context_overflow_error() -> None:
    request = UnifiedRequest.new("m").add_user_message("u" * 4000)
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=server.url, api_key="k") as counter:
            plugins = [Compactor(counter, budget=100)]
            async with CucaClient(
                ProviderEndpoint.OPENAI, base_url=server.url, api_key="k", plugins=plugins
            ) as client:
                with pytest.raises(ContextOverflowError, match="could not fit the request in 100"):
                    await client.generate(request)
    assert server.requests == []  # nothing was sent


async def test_compactor_without_a_counter_counts_with_its_clients_backend() -> None:
    """``plugins=[Compactor(budget=120)]`` alone: the turn's *before* seam gives the
    compactor the client's own backend to count with, no second client."""
    request = tool_conversation(6)
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        plugins = [Compactor(budget=120)]
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url, api_key="k", plugins=plugins
        ) as client:
            done = await client.generate(request)
    report = done.response.compaction
    assert report is not None and report.tokens_before > 120 >= report.tokens_after
    assert len(server.requests[0].json()["messages"]) < len(request.messages)


async def test_compactor_without_a_counter_called_by_hand_says_what_it_needs() -> None:
    with pytest.raises(ConfigurationError, match="counts with its client's backend"):
        await Compactor(budget=50).on_request(UnifiedRequest.new("m").add_user_message("hi"))
