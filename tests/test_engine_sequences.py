"""Where a turn goes among a model's sequences, and what RAM keeps of evicted ones
(pure bookkeeping, no llama.cpp)."""

from __future__ import annotations

import pytest

from cuca.engine.sequences import COPY_ABOVE, Placement, SavedStates, SequenceTable

SYSTEM = list(range(100, 140))  # a shared preamble longer than COPY_ABOVE tokens


def table(*held: list[int]) -> SequenceTable:
    sequences = SequenceTable(len(held))
    for slot, tokens in zip(sequences.slots, held, strict=True):
        slot.tokens = list(tokens)
    return sequences


def test_sequences_a_conversation_continues_on_its_own_sequence() -> None:
    sequences = table([*SYSTEM, 1, 2, 3], [*SYSTEM, 7, 8], [])
    placement = sequences.place([*SYSTEM, 7, 8, 9, 10])
    assert placement == Placement(1, len(SYSTEM) + 2)
    assert sequences.slots[1].busy


def test_sequences_the_last_prompt_token_is_always_prefilled() -> None:
    sequences = table([1, 2, 3, 4])
    assert sequences.place([1, 2, 3, 4]).keep == 3


def test_sequences_a_shared_preamble_is_copied_to_an_empty_sequence() -> None:
    """Another conversation that only shares the system prompt does not truncate the
    first one's history: the preamble is copied to a free, empty sequence."""
    other = SYSTEM + list(range(COPY_ABOVE + 5))
    sequences = table(other, [])
    placement = sequences.place([*SYSTEM, 999, 998])
    assert placement == Placement(1, len(SYSTEM), copy_from=0)
    assert sequences.slots[1].tokens == SYSTEM
    assert sequences.slots[0].tokens == other  # untouched


def test_sequences_a_short_loss_reuses_the_sequence_itself() -> None:
    sequences = table([*SYSTEM, 1, 2], [])
    assert sequences.place([*SYSTEM, 5]) == Placement(0, len(SYSTEM))
    assert sequences.slots[0].tokens == SYSTEM


def test_sequences_nothing_in_common_goes_to_an_empty_sequence() -> None:
    sequences = table([1, 2, 3], [])
    assert sequences.place([9, 9]) == Placement(1, 0)


def run(sequences: SequenceTable, prompt: list[int]) -> int:
    """Place ``prompt`` and do what the engine does: prefill it, end the turn."""
    seq = sequences.place(prompt).seq_id
    sequences.slots[seq].tokens = list(prompt)
    sequences.release(seq)
    return seq


def test_sequences_when_all_hold_something_the_least_recently_used_is_evicted() -> None:
    sequences = table([], [])
    assert run(sequences, [1, 1, 1]) == 0
    assert run(sequences, [2, 2, 2]) == 1
    assert run(sequences, [1, 1, 1, 1]) == 0  # sequence 0 again: now the most recent
    placement = sequences.place([3, 3])
    assert placement == Placement(1, 0, evicted=(2, 2, 2))


def test_sequences_busy_ones_are_never_chosen() -> None:
    sequences = table([1, 2, 3], [])
    sequences.slots[0].busy = True
    assert sequences.place([1, 2, 3, 4]) == Placement(1, 0)
    assert not sequences.free()
    with pytest.raises(LookupError):
        sequences.place([5])


def test_sequences_a_saved_state_that_shares_more_is_restored() -> None:
    sequences = table([4, 4, 4])
    placement = sequences.place([1, 2, 3, 4], saved=[(1, 2, 3), (1, 5)])
    assert placement == Placement(0, 3, restore=(1, 2, 3), evicted=(4, 4, 4))
    assert sequences.slots[0].tokens == [1, 2, 3]


def test_saved_states_stay_within_the_budget() -> None:
    saved = SavedStates(budget=10)
    saved.put((1,), b"aaaa")
    saved.put((2,), b"bbbb")
    saved.put((3,), b"cccc")  # drops the oldest
    assert saved.tokens() == [(2,), (3,)] and saved.used == 8
    saved.put((4,), b"x" * 11)  # larger than the budget: not kept
    assert saved.tokens() == [(2,), (3,)]
    assert saved.take((3,)) == b"cccc" and saved.used == 4
    assert SavedStates(budget=0).fits(1) is False


def test_sequences_the_same_prompt_again_is_copied_beside_its_answer() -> None:
    """A prompt asked again after its answer would cut that answer from its sequence:
    the shared prompt (all but its last token) is copied to a free one instead."""
    prompt = list(range(10, 30))
    sequences = table([*prompt, 1, 2, 3, 4, 5, 6], [])
    assert sequences.place(prompt) == Placement(1, len(prompt) - 1, copy_from=0)


def test_sequences_with_none_empty_the_same_prompt_again_cuts_its_own_answer() -> None:
    """Every free sequence holds a conversation: copying the prompt beside its answer
    would evict another whole conversation (and cost a copy), so the answer's tail goes
    instead, as llama-server's slots do; the other conversations keep their sequences."""
    prompt, other = list(range(10, 30)), list(range(50, 80))
    sequences = table([*prompt, 1, 2, 3, 4, 5, 6], other)
    sequences.slots[0].last_used, sequences.slots[1].last_used = 2, 1  # 1 is the victim
    placement = sequences.place(prompt)
    assert placement == Placement(0, len(prompt) - 1, evicted=(*prompt, 1, 2, 3, 4, 5, 6))
    assert sequences.slots[0].tokens == prompt[:-1]
    assert sequences.slots[1].tokens == other


def test_sequences_with_none_empty_a_long_tail_still_evicts_a_shorter_conversation() -> None:
    """The cheaper loss wins: a branch whose cut would drop more cached tokens than the
    least recently used conversation holds copies its prefix over that one instead."""
    prompt, short = list(range(10, 30)), list(range(50, 55))
    sequences = table([*prompt, *range(200, 230)], short)
    sequences.slots[0].last_used, sequences.slots[1].last_used = 2, 1
    placement = sequences.place([*prompt[:-1], 999])
    assert placement == Placement(1, len(prompt) - 1, copy_from=0, evicted=tuple(short))
    assert sequences.slots[0].tokens == [*prompt, *range(200, 230)]


def test_sequences_a_prefix_shorter_than_a_copy_is_worth_is_prefilled() -> None:
    sequences = table(list(range(1, 21)), [])
    short = [1, 2, 3, 4, 5, 6, 7, 50, 51]  # 7 shared tokens: a copy costs more
    assert sequences.place(short) == Placement(1, 0)
