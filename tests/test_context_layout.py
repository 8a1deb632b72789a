"""How compaction cuts a conversation (``cuca.context.layout``), I/O-free and fast: the
rules of ``cuca.context.conversation``'s docstring (docs/context.md, "What every
strategy keeps"), one small conversation each, every index written out. The same
rules over random conversations are ``test_context_compactor.py``'s."""

from __future__ import annotations

from cuca import MessageRole, Text, ToolCall, ToolResult, UnifiedMessage
from cuca.context import Layout, layout
from cuca.context.conversation import tool_pairs

SYSTEM = UnifiedMessage(MessageRole.SYSTEM, "sys")
ASSISTANT = UnifiedMessage(MessageRole.ASSISTANT, "answer")


def user(text: str = "question") -> UnifiedMessage:
    return UnifiedMessage(MessageRole.USER, text)


def calls(*ids: str) -> UnifiedMessage:
    """An assistant message calling a tool once per id."""
    return UnifiedMessage(MessageRole.ASSISTANT, tuple(ToolCall(i, "lookup") for i in ids))


def result(call: str) -> UnifiedMessage:
    """A Tool message answering ``call``."""
    return UnifiedMessage(MessageRole.TOOL, ToolResult(call, "42"), tool_call_id=call)


def test_layout_of_no_messages_is_empty() -> None:
    assert layout([]) == Layout(None, (), ())


def test_layout_head_turns_and_tail() -> None:
    """The first system message is the head, each user message starts a turn, and the
    latest user message with what follows it is the tail."""
    messages = [SYSTEM, user(), ASSISTANT, user(), ASSISTANT, user(), ASSISTANT, ASSISTANT]
    assert layout(messages) == Layout(0, ((1, 2), (3, 4)), (5, 6, 7))


def test_layout_what_stands_before_the_first_user_message_is_a_turn_of_its_own() -> None:
    messages = [SYSTEM, ASSISTANT, ASSISTANT, user(), ASSISTANT, user()]
    assert layout(messages) == Layout(0, ((1, 2), (3, 4)), (5,))


def test_layout_only_the_first_system_message_is_the_head() -> None:
    """A later system message belongs to the turn it stands in, and may go with it."""
    messages = [SYSTEM, user(), SYSTEM, ASSISTANT, user()]
    assert layout(messages) == Layout(0, ((1, 2, 3),), (4,))


def test_layout_a_system_message_after_the_latest_user_message_stays_in_the_tail() -> None:
    assert layout([user(), SYSTEM, ASSISTANT]) == Layout(None, (), (0, 1, 2))
    assert layout([user(), ASSISTANT, user(), SYSTEM]) == Layout(None, ((0, 1),), (2, 3))


def test_layout_without_a_user_message_has_no_tail() -> None:
    assert layout([SYSTEM, ASSISTANT, ASSISTANT]) == Layout(0, ((1, 2),), ())
    assert layout([ASSISTANT]) == Layout(None, ((0,),), ())


def test_layout_merges_the_turns_a_call_and_its_result_span() -> None:
    """A call made in one turn and answered in a later one: the turns between go as one."""
    messages = [
        user(),
        calls("a"),
        user(),
        ASSISTANT,
        user(),
        result("a"),
        user(),
        ASSISTANT,
        user(),
    ]
    assert layout(messages) == Layout(None, ((0, 1, 2, 3, 4, 5), (6, 7)), (8,))


def test_layout_a_turn_whose_call_is_answered_in_the_tail_joins_the_tail() -> None:
    messages = [
        SYSTEM,
        user(),
        ASSISTANT,
        user(),
        calls("a"),
        user(),
        ASSISTANT,
        user(),
        result("a"),
    ]
    assert layout(messages) == Layout(0, ((1, 2),), (3, 4, 5, 6, 7, 8))


def test_layout_a_call_made_before_a_merge_still_pulls_the_merged_turn_into_the_tail() -> None:
    """Turn 2 calls ``b`` and then answers turn 1's ``a``, which merges the two; ``b``
    answered in the tail takes the merged turn (with ``a``'s call) along."""
    messages = [user(), calls("a"), user(), calls("b"), result("a"), user(), result("b")]
    assert layout(messages) == Layout(None, (), (0, 1, 2, 3, 4, 5, 6))
    pieces = layout([user(), ASSISTANT, *messages])
    assert pieces == Layout(None, ((0, 1),), (2, 3, 4, 5, 6, 7, 8))


def test_layout_a_result_block_in_any_message_answers_its_call() -> None:
    """Anthropic's shape: the results ride in a user message's blocks."""
    answer = UnifiedMessage(MessageRole.USER, (ToolResult("a", "42"), Text("and?")))
    messages = [user(), calls("a"), answer, ASSISTANT, user()]
    assert layout(messages) == Layout(None, ((0, 1, 2, 3),), (4,))


def test_layout_a_tool_message_answers_its_call_by_its_id() -> None:
    """A Tool message with the call's id and text in place of a result block."""
    answer = UnifiedMessage(MessageRole.TOOL, "42", tool_call_id="a")
    messages = [user(), calls("a"), user(), answer, user()]
    assert layout(messages) == Layout(None, ((0, 1, 2, 3),), (4,))
    late = [user(), ASSISTANT, user(), calls("a"), user(), answer]
    assert layout(late) == Layout(None, ((0, 1),), (2, 3, 4, 5))


def test_layout_a_message_of_another_role_is_no_answer_by_its_id_alone() -> None:
    """Only a Tool message answers by ``tool_call_id``; a user message that happens to
    carry one (no result block) starts a turn like any other."""
    stray = UnifiedMessage(MessageRole.USER, "again", tool_call_id="a")
    messages = [user(), calls("a"), result("a"), stray, ASSISTANT, user()]
    assert layout(messages) == Layout(None, ((0, 1, 2), (3, 4)), (5,))


def test_layout_kept_lists_head_turns_and_tail_in_order() -> None:
    pieces = Layout(0, ((1, 2), (3, 4), (5,)), (6, 7))
    assert pieces.kept([]) == [0, 6, 7]
    assert pieces.kept([(5,), (1, 2)]) == [0, 1, 2, 5, 6, 7]
    assert Layout(None, ((0,), (1,)), (2,)).kept([(1,)]) == [1, 2]


def test_tool_pairs_are_every_result_block_in_order() -> None:
    both = UnifiedMessage(
        MessageRole.USER, (Text("here"), ToolResult("b", "1"), ToolResult("c", "2"))
    )
    messages = [user(), calls("a"), result("a"), calls("b", "c"), both, user()]
    assert tool_pairs(messages) == [(2, 0), (4, 1), (4, 2)]
    assert tool_pairs([user(), ASSISTANT]) == []


def test_layout_a_result_whose_call_is_not_in_the_conversation_stays_in_its_turn() -> None:
    """A history that starts mid tool loop: the orphan result merges nothing."""
    messages = [result("gone"), user(), ASSISTANT, user(), result("gone"), user()]
    assert layout(messages) == Layout(None, ((0,), (1, 2), (3, 4)), (5,))
