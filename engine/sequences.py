"""Which sequence of the K/V cache a turn runs on: a prefix cache per conversation.

A model holds ``n_seq`` sequences; each keeps the K/V of the tokens it last held after
its turn ends, so a conversation that comes back finds its history warm. Pure
bookkeeping, no llama.cpp: :class:`SequenceTable` says where a prompt goes
(:meth:`SequenceTable.place`) and :class:`SavedStates` keeps evicted sequences' states
within a byte budget; the engine thread carries the plans out.

The rules, for a new prompt, among the sequences no turn is using:

1. Find the longest common prefix (the seed's rule: always leaving the last prompt
   token to prefill); ties go to the sequence that loses the fewest cached tokens.
2. If that sequence loses at most :data:`SAME_CONVERSATION` cached tokens, the turn
   continues its conversation there.
3. Otherwise the turn is another conversation, and must not cut that one's history: it
   goes to an empty sequence, else to the least recently used one (whose conversation
   is evicted, and saved in RAM first when a budget allows it). A shared prefix of at
   least :data:`COPY_ABOVE` tokens (a system prompt, the same prompt again) is copied
   there first. But when no free sequence is empty, a history is lost either way: the
   turn then cuts the tail of the sequence it shares a prefix with, in place, if that
   tail is no longer than the least recently used conversation (as llama-server's
   slots do with the same prompt again: the copy and the eviction both cost more).
4. A saved state that shares more with the prompt than any sequence is restored into
   the sequence rule 3 picks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import attrs

from .prefix import plan_reuse

__all__ = [
    "COPY_ABOVE",
    "SAME_CONVERSATION",
    "Placement",
    "SavedStates",
    "SequenceSlot",
    "SequenceTable",
]

SAME_CONVERSATION = 4
"""Cached tokens a turn may drop from a sequence and still count as the conversation
that sequence holds (the same prompt again drops one)."""

COPY_ABOVE = 8
"""The shortest shared prefix worth copying from another sequence rather than
prefilling. A copy moves a whole sequence's cells whatever it holds (measured on
4,096-cell sequences, 1 thread, load 3: 20-45 ms on SmolLM2, 45-70 ms on Gemma 3),
while a prompt token prefilled in a chunk costs 4-7 ms and a prefill step holds at
least :data:`~cuca.engine.rows.TOGETHER_ROWS` (8) rows anyway: under 8 tokens the copy
costs more than the prefill it saves."""


@attrs.define
class SequenceSlot:
    """One sequence of the cache: the keys of the tokens whose K/V it holds, in order
    (token ids, with how each was evaluated: :mod:`~cuca.engine.rows`)."""

    seq_id: int
    tokens: list[int] = attrs.Factory(list)
    last_used: int = 0  # the tick of the last turn placed on it; 0: never used
    busy: bool = False


@attrs.frozen
class Placement:
    """Where a prompt goes.

    ``keep`` cached tokens of sequence ``seq_id`` are reused (the prompt's read tokens),
    after first copying sequence ``copy_from`` into it, or restoring the saved state
    ``restore`` into it, when set. ``evicted`` holds the tokens the sequence held before
    and loses (what a budget may save).
    """

    seq_id: int
    keep: int
    copy_from: int | None = None
    restore: tuple[int, ...] | None = None
    evicted: tuple[int, ...] = ()


class SequenceTable:
    """The ``n_seq`` sequences of one model and the turns placed on them.

    Sequences hold cache keys (:mod:`~cuca.engine.rows`): token ids, and in the exact
    mode how each was evaluated.
    """

    def __init__(self, n_seq: int) -> None:
        self.slots = [SequenceSlot(i) for i in range(n_seq)]
        self._tick = 0

    @staticmethod
    def _reuse(cached: Sequence[int], prompt: Sequence[int]) -> int:
        return plan_reuse(cached, prompt).keep

    def free(self) -> bool:
        """Whether a sequence is free for a new turn."""
        return any(not slot.busy for slot in self.slots)

    def place(self, prompt: Sequence[int], saved: Sequence[Sequence[int]] = ()) -> Placement:
        """Choose a free sequence for ``prompt`` (see the module's rules) and mark it busy.

        ``saved`` are the token lists of states kept in RAM. Raises ``LookupError`` if
        every sequence is busy.
        """
        free = [slot for slot in self.slots if not slot.busy]
        if not free:
            raise LookupError("every sequence is busy")
        best = max(
            free,
            key=lambda s: (
                self._reuse(s.tokens, prompt),
                -len(s.tokens),
                -s.last_used,
            ),
        )
        keep = self._reuse(best.tokens, prompt)
        empty = [slot for slot in free if not slot.tokens]
        victim = empty[0] if empty else min(free, key=lambda s: s.last_used)
        restore = max(saved, key=lambda tokens: self._reuse(tokens, prompt), default=None)
        if restore is not None and self._reuse(restore, prompt) > keep:
            placement = Placement(
                victim.seq_id,
                self._reuse(restore, prompt),
                restore=tuple(restore),
                evicted=tuple(victim.tokens),
            )
            return self._take(victim, placement)
        if keep and len(best.tokens) - keep <= SAME_CONVERSATION:
            return self._take(best, Placement(best.seq_id, keep))
        if keep and not empty and len(best.tokens) - keep <= len(victim.tokens):
            # every free sequence holds a conversation: cutting the tail of the one that
            # shares the prefix loses fewer cached tokens than evicting another whole
            return self._take(best, Placement(best.seq_id, keep, evicted=tuple(best.tokens)))
        evicted = tuple(victim.tokens)
        if victim is best:
            return self._take(best, Placement(best.seq_id, keep, evicted=evicted))
        if keep >= COPY_ABOVE:
            placement = Placement(victim.seq_id, keep, copy_from=best.seq_id, evicted=evicted)
            return self._take(victim, placement)
        return self._take(victim, Placement(victim.seq_id, 0, evicted=evicted))

    def _take(self, slot: SequenceSlot, placement: Placement) -> Placement:
        self._tick += 1
        slot.busy = True
        slot.last_used = self._tick
        if placement.copy_from is not None:
            slot.tokens = self.slots[placement.copy_from].tokens[: placement.keep]
        elif placement.restore is not None:
            slot.tokens = list(placement.restore[: placement.keep])
        else:
            del slot.tokens[placement.keep :]
        return placement

    def release(self, seq_id: int) -> None:
        """The turn on ``seq_id`` has ended; its tokens stay for the next turn."""
        self.slots[seq_id].busy = False


class SavedStates:
    """Evicted sequences' states kept in RAM, least recently used dropped first, within
    ``budget`` bytes in all (0 keeps nothing)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._states: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self.used = 0

    def tokens(self) -> list[tuple[int, ...]]:
        """The token lists of the states held, oldest first."""
        return list(self._states)

    def fits(self, size: int) -> bool:
        """Whether a state of ``size`` bytes can be kept at all."""
        return 0 < size <= self.budget

    def put(self, tokens: tuple[int, ...], data: bytes) -> None:
        """Keep ``data`` (the state of a sequence holding ``tokens``), dropping the least
        recently used states until it fits; a state larger than the budget is not kept."""
        if not self.fits(len(data)) or not tokens:
            return
        self._drop(tokens)
        while self.used + len(data) > self.budget:
            self._drop(next(iter(self._states)))
        self._states[tokens] = data
        self.used += len(data)

    def take(self, tokens: tuple[int, ...]) -> bytes:
        """The state saved for ``tokens``, removed from the store (it goes back into a
        sequence, which holds it from then on)."""
        data = self._states.pop(tokens)
        self.used -= len(data)
        return data

    def _drop(self, tokens: tuple[int, ...]) -> None:
        data = self._states.pop(tokens, None)
        if data is not None:
            self.used -= len(data)
