"""The opening of an answer, read on the side: did the server fail before its first item?

A server that answered 200 may still say, inside the stream and before anything of the
answer, that it is overloaded or rate limited (Anthropic's ``overloaded_error`` event,
an OpenAI-compatible error frame, Gemini's raw error object, llama.cpp's error frame).
That is the server's explicit answer, as a 529 or a 429 would have been, and nothing of
the turn exists yet: the transport may send the request again
(:meth:`cuca.retry.RetryPolicy.resend_delay`). To know, it reads the body's first bytes
with a framer and a decoder of its own (the adapter's, I/O-free) while it holds them
back; once they show an item, the end of the answer or an error, the bytes go on
downstream as they came, where the turn's own framer and decoder read them. Only the
frames before the first item are read twice; nothing downstream (user stages, gates,
observers, the cache) ever sees an attempt that was sent again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .protocols import Framer, StreamDecoder
from .sse import SseEvent

__all__ = ["HOLD_LIMIT", "Opening"]

HOLD_LIMIT = 256 * 1024
"""Body bytes an :class:`Opening` reads without finding an item before it gives up
deciding: a body that long is an answer, and is passed on (it is not sent again)."""


class Opening:
    """The first bytes of one attempt's body, decoded until they decide whether the
    attempt failed before its first item.

    Feed it the body's reads; ``decided`` turns true at the first item (a block or an
    error item), at the provider's end marker, at an error, at the end of the body, or
    after ``limit`` bytes. ``error`` is then the error that ended the attempt before any
    item (``None`` when the attempt produced an item or ended cleanly): what the turn's
    own decoder raises from the same bytes.
    """

    def __init__(self, framer: Framer, decoder: StreamDecoder, limit: int = HOLD_LIMIT) -> None:
        self._framer = framer
        self._decoder = decoder
        self._limit = limit
        self._read = 0
        self.decided = False
        self.error: Exception | None = None

    def feed(self, data: bytes) -> bool:
        """Read the next bytes of the body; whether the opening is decided."""
        if not self.decided:
            self._read += len(data)
            try:
                self._events(self._framer.feed(data))
            except Exception as exc:  # what the turn's own stages would raise, as it is
                self._fail(exc)
            if self._read > self._limit:
                self.decided = True
        return self.decided

    def close(self) -> None:
        """The body ended: what the framer and the decoder still hold decides."""
        if self.decided:
            return
        try:
            self._events(self._framer.close())
            if not self.decided:
                self._items(self._decoder.close())
        except Exception as exc:
            self._fail(exc)
        self.decided = True

    def _events(self, events: Sequence[SseEvent]) -> None:
        for event in events:
            self._items(self._decoder.feed(event))
            if self.decided:
                return
            if self._decoder.finished:
                self.decided = True
                return

    def _items(self, items: Sequence[Any]) -> None:
        if items:
            self.decided = True

    def _fail(self, error: Exception) -> None:
        if not self.decided:
            self.error = error
            self.decided = True
