"""What the streaming output parsers share: the feed/close loop over a text buffer and
the reasoning spans they count tokens in.

A parser subclasses :class:`StreamingParser` and implements ``_step``, one move of its
state machine; ``feed`` and ``close`` run it until it waits for more text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeAlias, TypeVar

from cuca.errors import ProviderError
from cuca.types import Text, Thinking, ToolCall

__all__ = ["ParsedItem", "StreamingParser", "tokens_in_spans"]

ParsedItem: TypeAlias = Text | Thinking | ToolCall | ProviderError
"""One output parser's item: a block, or the error that replaces a malformed tool call
(the harmony parser's and the others'; narrower than :data:`cuca.turn.Item`)."""

ItemT = TypeVar("ItemT")


def tokens_in_spans(spans: Sequence[tuple[int, int]], token_ends: Sequence[int]) -> int:
    """How many tokens fall in ``spans`` (character ranges); ``token_ends[i]`` is where
    token ``i``'s text ends, and a token with no text counts when its position lies
    inside a span."""
    count, start, j = 0, 0, 0
    for end in token_ends:
        while j < len(spans) and spans[j][1] <= start:
            j += 1
        if j < len(spans):
            s, e = spans[j]
            if (start < e and end > s) or (start == end and s <= start < e):
                count += 1
        start = end
    return count


class StreamingParser(Generic[ItemT]):
    """The buffer, the loop and the reasoning spans of an incremental output parser.

    ``thinking_enabled`` is whether the request enabled thinking, which decides whether
    reasoning tokens are counted (:meth:`reasoning_token_count`).
    """

    def __init__(self, *, thinking_enabled: bool) -> None:
        self.thinking_enabled = thinking_enabled
        self._buf = ""
        self._pos = 0  # offset of _buf[0] in everything fed so far
        self._spans: list[list[int]] = []  # [start] while open, [start, end] once closed
        self._closed = False

    @property
    def reasoning_spans(self) -> tuple[tuple[int, int], ...]:
        """Where reasoning lies in the text fed so far, markers included, as ``(start,
        end)`` character offsets; an open block ends at the text fed so far."""
        end = self._pos + len(self._buf)
        return tuple((span[0], span[1] if len(span) > 1 else end) for span in self._spans)

    def reasoning_token_count(self, token_ends: Sequence[int]) -> int | None:
        """How many tokens fall in reasoning, or ``None`` when thinking is off.

        ``token_ends[i]`` is the offset where token ``i``'s text ends (token ``i`` spans
        ``token_ends[i-1]`` to ``token_ends[i]``); a token that produced no text (half of
        a UTF-8 character) counts when its position lies inside a block.
        """
        if not self.thinking_enabled:
            return None
        return tokens_in_spans(self.reasoning_spans, token_ends)

    def feed(self, text: str) -> list[ItemT]:
        """Parse ``text``, the next piece of output; return the items now decided."""
        if self._closed:
            raise RuntimeError("feed() after close()")
        self._buf += text
        out: list[ItemT] = []
        while self._step(out, final=False):
            pass
        return out

    def close(self) -> list[ItemT]:
        """End of output: flush what was held back and end what is open."""
        out: list[ItemT] = []
        if not self._closed:
            self._closed = True
            while self._step(out, final=True):
                pass
            self._at_end(out)
            if self._spans and len(self._spans[-1]) == 1:
                self._spans[-1].append(self._pos)
        return out

    def _consume(self, n: int) -> str:
        taken, self._buf = self._buf[:n], self._buf[n:]
        self._pos += n
        return taken

    def _step(self, out: list[ItemT], final: bool) -> bool:
        """One move; true when something changed and the loop goes on."""
        raise NotImplementedError

    def _at_end(self, out: list[ItemT]) -> None:
        """What ends with the output, after the last step (nothing by default)."""
