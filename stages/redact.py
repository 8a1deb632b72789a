"""Redaction of streamed text that sees across delta boundaries.

A secret can arrive split over two deltas (``"...; sec"`` then ``"ret again"``): a stage
that rewrites each delta alone lets it through. :class:`Redactor` is the I/O-free part:
it replaces every whole occurrence of a secret and holds back only the longest tail that
could still grow into one, so the output is exactly what redacting the whole text at
once gives, under any chunking, and streaming is delayed by at most one secret's length.
:func:`redact_text` wraps it as a stage for the ``decode -> chunk_hooks`` hop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from cuca.errors import ConfigurationError
from cuca.turn import EndOfTurn, Item
from cuca.types import Text, Thinking

from .pipeline import Stage

__all__ = ["Redactor", "redact_text"]

DEFAULT_REPLACEMENT = "******"


class Redactor:
    """Streaming find-and-replace of fixed strings (an API key, a name, a password).

    ``feed(text)`` returns what is safe to show now; ``flush()`` returns what was held
    back, once the text has ended. At one position the longest secret wins, and matches
    do not overlap, as with ``re.sub`` over the whole text.
    """

    def __init__(self, secrets: Iterable[str], replacement: str = DEFAULT_REPLACEMENT) -> None:
        words = sorted({s for s in _strings(secrets) if s}, key=len, reverse=True)
        if not words:
            raise ConfigurationError("a Redactor needs at least one non-empty secret")
        self.replacement = replacement
        self._pattern = re.compile("|".join(map(re.escape, words)))
        self._prefixes = frozenset(w[:i] for w in words for i in range(1, len(w)))
        self._longest = len(words[0])
        self._held = ""

    def feed(self, text: str) -> str:
        """The redacted text that can be released after ``text`` arrived."""
        buffer = self._held + text
        hold = self._hold_point(buffer, 0)
        out: list[str] = []
        done = 0
        for match in self._pattern.finditer(buffer):
            if match.start() >= hold:
                break  # a longer secret may still start here
            out += (buffer[done : match.start()], self.replacement)
            done = match.end()
            if done > hold:  # the match swallowed the tail that was held
                hold = self._hold_point(buffer, done)
        out.append(buffer[done:hold])
        self._held = buffer[hold:]
        return "".join(out)

    def flush(self) -> str:
        """Everything still held, redacted; the redactor is then empty."""
        held, self._held = self._held, ""
        return self._pattern.sub(lambda _: self.replacement, held)

    @property
    def held(self) -> int:
        """How many characters are held back (always fewer than the longest secret)."""
        return len(self._held)

    def _hold_point(self, buffer: str, start: int) -> int:
        """The first position from ``start`` where the rest of ``buffer`` is a proper
        prefix of a secret (``len(buffer)`` if there is none)."""
        for position in range(max(start, len(buffer) - self._longest + 1), len(buffer)):
            if buffer[position:] in self._prefixes:
                return position
        return len(buffer)


def _strings(secrets: Iterable[str]) -> list[str]:
    if isinstance(secrets, str):
        raise ConfigurationError("secrets is a list of strings, not one string")
    words = list(secrets)
    for word in words:
        if not isinstance(word, str):
            raise ConfigurationError(f"a secret is a string, not {type(word).__name__}")
    return words


Streamed = Text | Thinking


def redact_text(
    secrets: Iterable[str], replacement: str = DEFAULT_REPLACEMENT
) -> Stage[Item | EndOfTurn, Item | EndOfTurn]:
    """A stage replacing ``secrets`` in Text and Thinking blocks, across delta boundaries.

    Insert it between ``decode`` and ``chunk_hooks``:
    ``before("chunk_hooks", redact_text(["hunter2"]))``. Text and Thinking are redacted
    as two separate texts. What is held back is released, redacted, before any other
    item (a tool call, an error item, a block of the other kind, the end of the turn),
    with a block that carries a signature (which ends its part), and when the stream
    ends.
    """
    words = _strings(secrets)
    Redactor(words, replacement)  # refuse bad secrets when the stage is built, not per turn

    async def redact(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        run = _Run(words, replacement)
        async for batch in receive:
            out: list[Any] = []
            for item in batch:
                run.item(item, out)
            if out:
                await send.send(out)
        out = []
        run.release(out)
        if out:
            await send.send(out)

    return redact


class _Run:
    """The redaction state of one turn: one redactor, and the block its text came from."""

    def __init__(self, words: list[str], replacement: str) -> None:
        self._redactor = Redactor(words, replacement)
        self._last: Streamed | None = None

    def item(self, item: Any, out: list[Any]) -> None:
        if not isinstance(item, Text | Thinking) or (isinstance(item, Thinking) and item.redacted):
            self.release(out)
            out.append(item)
            return
        if self._last is not None and type(self._last) is not type(item):
            self.release(out)
        text = self._redactor.feed(item.text)
        if item.signature is not None:
            text += self._redactor.flush()
        self._last = item
        if text or item.signature is not None:
            out.append(attrs.evolve(item, text=text))

    def release(self, out: list[Any]) -> None:
        """Emit what is held, as a block like the last one (without its signature)."""
        text = self._redactor.flush()
        if text and self._last is not None:
            out.append(attrs.evolve(self._last, text=text, signature=None))
        self._last = None
