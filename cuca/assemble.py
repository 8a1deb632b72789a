"""Deltas into whole blocks: one assembler, fed as a turn streams.

A stream hands out Text and Thinking deltas; a message holds whole blocks. The rule
of merging is written once, here, and used by everything that keeps a turn's message:
the stream (``ResponseStream.message``, ``generate``'s ``Completion``), the tool loop
(each step's assistant message) and the session log (the blocks it stores).

The rule: adjacent Text deltas merge, and adjacent Thinking deltas merge. A delta that
carries provider data keeps it on the merged block (the last delta's signature; for
Thinking, the last provider any delta named, and the last delta's id). A signed block
ends its run: a delta after a signed Text or a signed (or identified) Thinking starts
a new block, so two signed blocks are never fused and unsigned text never joins a
signed block after its signature. Redacted thinking never merges. Every other block
(a tool call, an image) stands alone and ends the run before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .types import (
    BLOCK_TYPES,
    Block,
    MessageRole,
    ProviderEndpoint,
    Text,
    Thinking,
    UnifiedMessage,
)

__all__ = ["BlockAssembler", "merge_blocks"]


class BlockAssembler:
    """Merges deltas into whole blocks as they arrive, as :func:`merge_blocks` merges
    them all at once (it is this class, fed in one call).

    A run of deltas is held as its strings, joined once when the run ends: linear in
    the total text, and few objects held however long the turn (20,000 deltas kept as
    blocks to the end cost the garbage collector more than the merge).
    """

    __slots__ = ("_done", "_first", "_last", "_provider", "_texts")

    def __init__(self) -> None:
        self._done: list[Block] = []  # the whole blocks, but the current run
        self._first: Block | None = None  # the run's first delta
        self._last: Block | None = None  # the run's last delta (None: no run)
        self._texts: list[str] = []  # the run's texts, when it has more than one delta
        self._provider: ProviderEndpoint | None = None  # the last provider a Thinking delta named

    def add(self, block: Block) -> None:
        """One more block or delta."""
        last = self._last
        if last is not None:
            # the common case first: one more plain text delta
            if type(block) is Text and type(last) is Text and last.signature is None:
                self._grow(block)
                return
            if _continues(last, block):
                self._grow(block)  # type: ignore[arg-type]  # a Text or a Thinking
                return
            self._end_run()
        if isinstance(block, Text | Thinking):
            self._first = self._last = block
            self._provider = block.provider if isinstance(block, Thinking) else None
        else:
            self._done.append(block)  # a tool call, an image: never merged

    def extend(self, blocks: Iterable[Block]) -> None:
        """Every block of ``blocks``, in order."""
        add = self.add
        for block in blocks:
            add(block)

    def feed(self, items: Sequence[object]) -> None:
        """The blocks among a stream's ``items``, in order; anything else (an error
        item, an end-of-turn marker) is skipped. Plain text deltas after plain text,
        the bulk of any stream, take the short way."""
        for item in items:
            last = self._last
            if type(item) is Text and type(last) is Text and last.signature is None:
                if not self._texts:
                    self._texts.append(last.text)
                self._texts.append(item.text)
                self._last = item
            elif isinstance(item, BLOCK_TYPES):
                self.add(item)  # type: ignore[arg-type]

    def blocks(self) -> tuple[Block, ...]:
        """The whole blocks so far (the current run merged as it stands); the assembler
        goes on taking deltas after."""
        if self._last is None:
            return tuple(self._done)
        return (*self._done, self._merged())

    def message(self) -> UnifiedMessage:
        """The assistant message of the blocks so far."""
        return UnifiedMessage(MessageRole.ASSISTANT, self.blocks())

    def _grow(self, block: Text | Thinking) -> None:
        if not self._texts:
            assert self._first is not None
            self._texts.append(self._first.text)  # type: ignore[union-attr]
        self._texts.append(block.text)
        if type(block) is Thinking and block.provider is not None:
            self._provider = block.provider
        self._last = block

    def _end_run(self) -> None:
        self._done.append(self._merged())
        self._first = self._last = None
        self._texts = []

    def _merged(self) -> Block:
        """One block for the current run: the text joined, the last delta's signature,
        and for Thinking the last provider any delta named."""
        last = self._last
        assert last is not None
        if not self._texts:
            assert self._first is not None
            return self._first  # a run of one: the delta as it came
        text = "".join(self._texts)
        if isinstance(last, Text):
            return Text(text, last.signature, last.provider)
        assert isinstance(last, Thinking)
        return Thinking(text, last.signature, self._provider, id=last.id)


def _continues(last: Block, block: Block) -> bool:
    """Whether ``block`` extends the run whose last delta is ``last``."""
    if isinstance(block, Text):
        return isinstance(last, Text) and last.signature is None
    return (
        isinstance(block, Thinking)
        and isinstance(last, Thinking)
        and last.signature is None
        and last.id is None
        and not (last.redacted or block.redacted)
    )


def merge_blocks(blocks: Sequence[Block]) -> tuple[Block, ...]:
    """Merge adjacent Text deltas and adjacent Thinking deltas into whole blocks.

    A delta carrying provider data (a signature) keeps it on the merged block; a new
    signature (or reasoning item id) after one was already set starts a new block, so
    two signed blocks are never fused. Linear in the total text: each run of deltas is
    joined once. The same rule as :class:`BlockAssembler`, which this runs.
    """
    assembler = BlockAssembler()
    assembler.extend(blocks)
    return assembler.blocks()
