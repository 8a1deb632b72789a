"""How the exact mode evaluates each prompt token (pure: no llama.cpp)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cuca.engine.rows import (
    alone,
    canonical,
    find_spans,
    key,
    kinds_from_spans,
    message_spans,
    token_of,
)

F, T = False, True


def test_rows_a_key_holds_the_token_and_its_way() -> None:
    assert (token_of(key(49151, True)), alone(key(49151, True))) == (49151, True)
    assert (token_of(key(0, False)), alone(key(0, False))) == (0, False)
    assert key(7, True) != key(7, False)


def test_rows_a_fresh_prompt_goes_together_its_last_token_too() -> None:
    """The last token's logits come from a step of eight rows or more, warm or cold."""
    assert canonical([F] * 5) == (F, F, F, F, F)
    assert canonical([]) == ()


def test_rows_only_what_the_model_wrote_goes_alone() -> None:
    # prompt of turn 1 (4 tokens), its answer (3), the next user message (3): the token
    # before the answer (the end of the prompt it answered) went with its neighbours
    written = [F, F, F, F, T, T, T, F, F, F]
    assert canonical(written) == (F, F, F, F, T, T, T, F, F, F)
    assert canonical([F, T, F, T, F]) == (F, T, F, T, F)  # short runs are padded instead


@given(st.lists(st.booleans(), max_size=40), st.integers(0, 40))
def test_rows_a_prompt_s_ways_start_every_longer_prompt_s(written: list[bool], cut: int) -> None:
    """What makes a warm turn exact: the ways of a turn's prompt are the start of the
    ways of the next turn's prompt (which carries it, then the answer, then more)."""
    assert canonical(written)[:cut] == canonical(written[:cut])


def test_rows_find_spans_in_order_as_bytes() -> None:
    text = "user: hé\nassistant: Hello there\nuser: Hi\nassistant: Hello there\n"
    spans = find_spans(text, [" Hello there ", "Hello there", "never said"])
    first = text.encode().index(b"Hello")
    second = text.encode().rindex(b"Hello")
    assert spans == [(first, first + 11), (second, second + 11)]
    assert find_spans(text, ["", "   "]) == []


def test_rows_only_tokens_wholly_inside_a_span_were_written() -> None:
    # tokens of 3, 2, 2, 4 and 1 bytes; the span covers bytes 3..9
    assert kinds_from_spans([3, 2, 2, 4, 1], [(3, 9)]) == [F, T, T, F, F]
    assert kinds_from_spans([3, 0, 2], [(3, 5)]) == [F, F, T]
    assert kinds_from_spans([2, 2], []) == [F, F]


def test_rows_an_answer_repeating_the_user_is_found_in_its_own_turn() -> None:
    """A base model that repeats the user's words: its answer is looked for after the
    user's message, not at the first place the words occur."""
    text = "<u>Tell me about the moon.</u><m>Tell me about the moon.</m><u>More</u>"
    spans = message_spans(
        text, [(["Tell me about the moon."], False), (["", "Tell me about the moon."], True)]
    )
    start = text.index("<m>") + 3
    assert spans == [(start, start + len("Tell me about the moon."))]
    assert find_spans(text, ["Tell me about the moon."]) == [(3, 26)]  # the first place


def test_rows_reasoning_its_markers_and_the_answer_are_one_span() -> None:
    text = "<u>Why?</u><m><think>\nBecause.\n</think>\n\nSo.</m><u>Ok</u>"
    written = [(["Why?"], False), (["\nBecause.", "So."], True), (["Ok"], False)]
    start, end = text.index("<think>"), text.index("</m>")
    assert message_spans(text, written, "<think>") == [(start, end)]
    # the generation prompt opened the block: the model wrote from the reasoning on
    assert message_spans(text, written) == [(start + len("<think>"), end)]
