"""Each compaction strategy (``cuca.context.strategies``) on small conversations whose
counts are written out: what it removes, what it keeps, and what it says it did
(docs/context.md, "The strategies"). Fast and I/O-free: a request is counted as the
characters of its text, outputs and thinking, so every figure below can be checked
by hand. The rules over random conversations are ``test_context_compactor.py``'s."""

from __future__ import annotations

from typing import Any

import pytest

from cuca import (
    ImageBase64,
    MessageRole,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)
from cuca.context import (
    ClampMessages,
    ClearToolResults,
    DropOldestTurns,
    SlidingWindow,
    SummariseOldestTurns,
    TokenTarget,
)


def chars(request: UnifiedRequest) -> int:
    total = 0
    for message in request.messages:
        for block in message.content:
            if isinstance(block, Text | Thinking):
                total += len(block.text)
            elif isinstance(block, ToolResult):
                total += len(block.output)
    return total


async def count(request: UnifiedRequest) -> int:
    return chars(request)


def target(tokens: int, goal: int | None = None) -> TokenTarget:
    return TokenTarget(tokens, count) if goal is None else TokenTarget(tokens, count, goal)


BIG = target(10**9)


def turns(n: int, size: int = 10, system: bool = True) -> UnifiedRequest:
    """A system message ("sys"), ``n`` turns of a user and an assistant message of
    ``size`` characters each (``size * 2`` a turn), and a latest user message "go"."""
    request = UnifiedRequest.new("m")
    if system:
        request = request.add_system_message("sys")
    for i in range(n):
        request = request.add_user_message(f"{i}".ljust(size, "u"))
        request = request.add_assistant_message(f"{i}".ljust(size, "a"))
    return request.add_user_message("go")


def tool_turns(n: int, output: str = "x" * 400) -> UnifiedRequest:
    request = UnifiedRequest.new("m").add_system_message("sys")
    for i in range(n):
        call = ToolCall(f"c{i}", "lookup", {"n": i})
        request = request.add_user_message(f"q{i}")
        request = request.add_message(UnifiedMessage(MessageRole.ASSISTANT, (call,)))
        request = request.add_tool_result(call.id, output, is_error=i == 0)
    return request.add_user_message("go")


def results(request: UnifiedRequest) -> list[ToolResult]:
    return [b for m in request.messages for b in m.content if isinstance(b, ToolResult)]


def users(request: UnifiedRequest) -> list[str]:
    return [m.text() for m in request.messages if m.role is MessageRole.USER]


# -- TokenTarget -----------------------------------------------------------------------


async def test_token_target_fits_at_most_its_tokens_and_aims_at_them_by_default() -> None:
    request = UnifiedRequest.new("m").add_user_message("x" * 10)
    assert target(10).goal == 10
    assert await target(10).fits(request)
    assert not await target(9).fits(request)
    assert await target(9).fits(request, 10)
    assert not await target(10).fits(request, 9)


# -- ClearToolResults ------------------------------------------------------------------


async def test_clear_tool_results_keeps_the_last_two_by_default() -> None:
    change = await ClearToolResults().apply(tool_turns(3), BIG)
    assert change is not None
    assert [r.output for r in results(change.request)] == [
        "[tool result removed by compaction: 400 characters]",
        "x" * 400,
        "x" * 400,
    ]
    assert change.removed == "1 tool result (400 characters)"


async def test_clear_tool_results_keeps_the_ids_and_the_error_flag() -> None:
    request = tool_turns(2)
    change = await ClearToolResults(keep_last=0).apply(request, BIG)
    assert change is not None
    assert [(r.tool_call_id, r.is_error) for r in results(change.request)] == [
        ("c0", True),
        ("c1", False),
    ]
    assert change.removed == "2 tool results (800 characters)"
    assert len(change.request.messages) == len(request.messages)


async def test_clear_tool_results_has_nothing_to_remove_within_keep_last() -> None:
    assert await ClearToolResults(keep_last=3).apply(tool_turns(3), BIG) is None
    assert await ClearToolResults().apply(turns(3), BIG) is None


async def test_clear_tool_results_counts_only_what_it_clears_now() -> None:
    """A result cleared by an earlier pass stays as it is and is not counted again."""
    first = await ClearToolResults(keep_last=2).apply(tool_turns(4, "y" * 30), BIG)
    assert first is not None
    second = await ClearToolResults(keep_last=1).apply(first.request, BIG)
    assert second is not None
    assert second.removed == "1 tool result (30 characters)"
    assert [r.output for r in results(second.request)] == [
        "[tool result removed by compaction: 30 characters]",
        "[tool result removed by compaction: 30 characters]",
        "[tool result removed by compaction: 30 characters]",
        "y" * 30,
    ]


# -- ClampMessages ---------------------------------------------------------------------


async def test_clamp_messages_cuts_what_is_longer_than_2000_characters_by_default() -> None:
    at_most = UnifiedRequest.new("m").add_assistant_message("a" * 2000).add_user_message("go")
    assert await ClampMessages().apply(at_most, BIG) is None
    longer = UnifiedRequest.new("m").add_assistant_message("a" * 1000 + "b" + "c" * 1000)
    change = await ClampMessages().apply(longer.add_user_message("go"), BIG)
    assert change is not None
    marker = "\n[... 1 characters cut by compaction ...]\n"
    assert change.request.messages[0].text() == "a" * 1000 + marker + "c" * 1000
    assert change.removed == "1 block clamped (1 characters)"


async def test_clamp_messages_clamps_tool_outputs_and_leaves_other_blocks_alone() -> None:
    thinking = Thinking("t" * 50, signature="sig")
    call = ToolCall("c0", "lookup")
    image = ImageBase64("image/png", "iVBORw0KGgo=")
    request = (
        UnifiedRequest.new("m")
        .add_user_message((image, Text("q" * 30)))
        .add_message(
            UnifiedMessage(
                MessageRole.ASSISTANT, (thinking, Text("short"), call, ToolCall("c1", "lookup"))
            )
        )
        .add_tool_result("c0", "0123456789" * 3)
        .add_tool_result("c1", "0123456789")  # exactly max_chars: left whole
        .add_user_message("go")
    )
    change = await ClampMessages(max_chars=10).apply(request, BIG)
    assert change is not None
    asked, answered, result, whole, latest = change.request.messages
    assert whole == request.messages[3]
    assert asked.content == (image, Text("qqqqq\n[... 20 characters cut by compaction ...]\nqqqqq"))
    assert answered == request.messages[1]  # thinking is never touched, short text neither
    assert result.content == (
        ToolResult("c0", "01234\n[... 20 characters cut by compaction ...]\n56789"),
    )
    assert result.tool_call_id == "c0" and latest == request.messages[4]
    assert change.removed == "2 blocks clamped (40 characters)"


async def test_clamp_messages_leaves_the_first_system_and_the_latest_user_message_whole() -> None:
    long = "z" * 30
    request = (
        UnifiedRequest.new("m")
        .add_system_message(long)
        .add_user_message(long)
        .add_system_message(long)
        .add_user_message(long)
    )
    change = await ClampMessages(max_chars=10).apply(request, BIG)
    assert change is not None
    clamped = "zzzzz\n[... 20 characters cut by compaction ...]\nzzzzz"
    assert [m.text() for m in change.request.messages] == [long, clamped, clamped, long]
    assert change.removed == "2 blocks clamped (40 characters)"
    only = UnifiedRequest.new("m").add_system_message(long).add_user_message(long)
    assert await ClampMessages(max_chars=10).apply(only, BIG) is None
    no_user = UnifiedRequest.new("m").add_assistant_message(long)
    change = await ClampMessages(max_chars=10).apply(no_user, BIG)
    assert change is not None and change.request.messages[0].text() == clamped


async def test_clamp_messages_with_an_odd_max_says_what_its_marker_says() -> None:
    """With ``max_chars=9`` the head and tail are 4 characters each: the step reports
    the characters the marker says were cut."""
    request = UnifiedRequest.new("m").add_assistant_message("w" * 20).add_user_message("go")
    change = await ClampMessages(max_chars=9).apply(request, BIG)
    assert change is not None
    assert (
        change.request.messages[0].text() == "wwww\n[... 12 characters cut by compaction ...]\nwwww"
    )
    assert change.removed == "1 block clamped (12 characters)"


# -- DropOldestTurns -------------------------------------------------------------------


@pytest.mark.parametrize("needed", range(1, 8))
async def test_drop_oldest_turns_drops_exactly_as_few_as_fit(needed: int) -> None:
    """Seven turns of 20 characters: a budget that ``needed`` drops reach (and one
    fewer does not) drops exactly those."""
    request = turns(7)
    budget = target(chars(request) - 20 * needed)
    change = await DropOldestTurns().apply(request, budget)
    assert change is not None
    assert change.removed == f"{needed} oldest turn{'s' * (needed > 1)} ({2 * needed} messages)"
    assert users(change.request) == [f"{i}".ljust(10, "u") for i in range(needed, 7)] + ["go"]
    assert change.request.messages[0].text() == "sys"


async def test_drop_oldest_turns_aims_at_the_goal_and_at_the_budget_past_its_reach() -> None:
    request = turns(6)  # 3 + 6 * 20 + 2 = 125
    reachable = await DropOldestTurns().apply(request, target(110, goal=70))
    assert reachable is not None and reachable.removed == "3 oldest turns (6 messages)"
    beyond = await DropOldestTurns().apply(request, target(110, goal=4))
    assert beyond is not None and beyond.removed == "1 oldest turn (2 messages)"


async def test_drop_oldest_turns_drops_all_when_none_is_enough() -> None:
    change = await DropOldestTurns().apply(turns(4), target(1))
    assert change is not None
    assert change.removed == "4 oldest turns (8 messages)"
    assert [m.text() for m in change.request.messages] == ["sys", "go"]


async def test_drop_oldest_turns_has_nothing_to_remove_without_turns() -> None:
    assert await DropOldestTurns().apply(turns(0), target(1)) is None


async def test_drop_oldest_turns_keeps_its_cut_even_where_fewer_would_fit_now() -> None:
    """The cut of the first request is kept for the next one of the same conversation
    while it fits, a cut of every turn included: the same prefix is sent, though a
    smaller cut would fit the budget too."""
    strategy = DropOldestTurns()
    first = await strategy.apply(turns(3), target(40, goal=5))  # 65: all three reach 5
    assert first is not None and first.removed == "3 oldest turns (6 messages)"
    step = turns(3).add_assistant_message("ss")  # 67: the goal is out of reach now
    again = await strategy.apply(step, target(40, goal=5))
    assert again is not None and again.removed == "3 oldest turns (6 messages)"
    fresh = await DropOldestTurns().apply(step, target(40, goal=5))
    assert fresh is not None and fresh.removed == "2 oldest turns (4 messages)"


async def test_drop_oldest_turns_cuts_anew_when_its_cut_no_longer_fits() -> None:
    strategy = DropOldestTurns()
    first = await strategy.apply(turns(6), target(110))
    assert first is not None and first.removed == "1 oldest turn (2 messages)"
    grown = turns(6).add_assistant_message("k" * 30)  # the old cut leaves 135
    again = await strategy.apply(grown, target(110))
    assert again is not None and again.removed == "3 oldest turns (6 messages)"


async def test_drop_oldest_turns_cuts_anew_for_another_conversation() -> None:
    strategy = DropOldestTurns()
    first = await strategy.apply(turns(6), target(110, goal=70))
    assert first is not None and first.removed == "3 oldest turns (6 messages)"
    shorter = await strategy.apply(turns(2), target(22))  # fewer turns than the old cut
    assert shorter is not None and shorter.removed == "2 oldest turns (4 messages)"
    other = turns(6, size=11)  # other turns, as many: 137, 22 a turn
    again = await strategy.apply(other, target(135))
    assert again is not None and again.removed == "1 oldest turn (2 messages)"


# -- SlidingWindow ---------------------------------------------------------------------


async def test_sliding_window_keeps_the_last_20_messages_by_default() -> None:
    request = turns(10)  # 22 messages: the first turn (1, 2) lies past the last 20
    change = await SlidingWindow().apply(request, BIG)
    assert change is not None and change.removed == "2 messages"
    assert users(change.request)[0] == "1uuuuuuuuu"
    assert change.request.messages[0].text() == "sys"
    assert await SlidingWindow().apply(turns(9), BIG) is None


async def test_sliding_window_keeps_a_turn_that_starts_on_its_edge() -> None:
    request = turns(4)  # 10 messages; the last 7 start at index 3, turn 1's first
    change = await SlidingWindow(last=7).apply(request, BIG)
    assert change is not None and change.removed == "2 messages"
    assert users(change.request) == ["1uuuuuuuuu", "2uuuuuuuuu", "3uuuuuuuuu", "go"]
    assert await SlidingWindow(last=9).apply(request, BIG) is None


# -- SummariseOldestTurns --------------------------------------------------------------


class Summaries:
    """A Summariser that records what it is asked and answers ``answer``."""

    def __init__(self, answer: str = "  They counted.  ") -> None:
        self.answer = answer
        self.asked: list[UnifiedRequest] = []

    async def generate(self, request: UnifiedRequest) -> Any:
        self.asked.append(request)
        answer = self.answer

        class Done:
            text = answer

        return Done()


async def test_summarise_asks_the_client_for_a_short_summary_of_a_plain_transcript() -> None:
    client = Summaries()
    call = ToolCall("c0", "lookup", {"n": 1})
    request = (
        UnifiedRequest.new("big")
        .add_system_message("sys")
        .add_user_message((Text("look"), ImageBase64("image/png", "iVBORw0KGgo=")))
        .add_message(UnifiedMessage(MessageRole.ASSISTANT, (Thinking("hmm", "sig"), call)))
        .add_tool_result("c0", "one")
        .add_assistant_message("it is one")
        .add_user_message("and?")
        .add_assistant_message("two")
        .add_user_message("go")
    )
    change = await SummariseOldestTurns(client, "small", keep_turns=1).apply(request, BIG)
    assert change is not None
    (ask,) = client.asked
    assert ask.model == "small" and ask.max_tokens == 256
    assert [m.role for m in ask.messages] == [MessageRole.SYSTEM, MessageRole.USER]
    assert ask.messages[0].text() == SummariseOldestTurns.INSTRUCTIONS
    assert ask.messages[1].text() == (
        "user: look [image]\n"
        "assistant: [called lookup {'n': 1}]\n"
        "tool: [result: one]\n"
        "assistant: it is one"
    )
    assert [m.text() for m in change.request.messages] == [
        "sys",
        "Summary of the earlier conversation: They counted.",
        "and?",
        "two",
        "go",
    ]
    assert change.request.messages[1].role is MessageRole.SYSTEM
    assert change.removed == "1 oldest turn (4 messages) summarised"
    assert change.request.model == "big"


async def test_summarise_keeps_the_last_two_turns_by_default_and_says_max_tokens() -> None:
    client = Summaries()
    strategy = SummariseOldestTurns(client, "small", max_tokens=64)
    change = await strategy.apply(turns(4, system=False), BIG)
    assert change is not None
    assert change.removed == "2 oldest turns (4 messages) summarised"
    assert change.request.messages[0].text() == "Summary of the earlier conversation: They counted."
    assert users(change.request) == ["2uuuuuuuuu", "3uuuuuuuuu", "go"]
    assert client.asked[0].max_tokens == 64 and strategy.written == 1
    assert await strategy.apply(turns(2), BIG) is None


async def test_summarise_writes_a_summary_once_per_set_of_turns() -> None:
    client = Summaries()
    strategy = SummariseOldestTurns(client, "small", keep_turns=1)
    await strategy.apply(turns(3), BIG)
    await strategy.apply(turns(3).add_assistant_message("more"), BIG)
    assert strategy.written == 1 and len(client.asked) == 1
    await strategy.apply(turns(4), BIG)
    assert strategy.written == 2 and len(client.asked) == 2


async def test_summarise_says_when_the_client_wrote_nothing() -> None:
    change = await SummariseOldestTurns(Summaries("  \n"), "small").apply(turns(3), BIG)
    assert change is not None
    assert change.request.messages[1].text() == "Summary of the earlier conversation: (no summary)"
