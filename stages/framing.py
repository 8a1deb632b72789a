"""How a response body is split into events: :class:`JsonOrSse`, every adapter's framer.

A body whose first non-blank byte is ``{`` is not an event stream but one JSON document
(a non-streamed turn, or an error body): it is handed on whole as one ``JSON_BODY``
event at the end of the body; any other body goes to the event-stream parser as it
arrives. No vendor knowledge: only where a body's events begin and end.
"""

from __future__ import annotations

from cuca.errors import SseParseError
from cuca.stages.protocols import Framer
from cuca.stages.sse import SseEvent

__all__ = ["JSON_BODY", "MAX_JSON_BODY", "JsonOrSse"]

JSON_BODY = "\njson body"
"""The event type of a response body that was one JSON document, not an event stream
(a type no server can send: it starts with a newline). Only a non-streamed turn's
decoder takes it; every other decoder reports it as a ``ProviderError``."""

MAX_JSON_BODY = 64 * 1024 * 1024
"""The largest non-streamed response body read (64 MiB); a larger one is an error."""

_BLANK = b" \t\r\n"


class JsonOrSse:
    """A framer that passes event streams to ``inner`` and gathers a JSON body whole."""

    def __init__(self, inner: Framer) -> None:
        self._inner = inner
        self._mode: str | None = None  # None until the first non-blank byte: "sse" | "json"
        self._body = bytearray()

    def feed(self, data: bytes) -> list[SseEvent]:
        if self._mode == "sse":
            return self._inner.feed(data)
        self._body += data
        if self._mode is None:
            head = self._body.lstrip(_BLANK)
            if not head:
                return []
            self._mode = "json" if head[:1] == b"{" else "sse"
            if self._mode == "sse":
                held, self._body = bytes(self._body), bytearray()
                return self._inner.feed(held)
        if len(self._body) > MAX_JSON_BODY:
            raise SseParseError(f"a JSON response body over {MAX_JSON_BODY} bytes")
        return []

    def close(self) -> list[SseEvent]:
        if self._mode != "json":
            return self._inner.close()
        try:
            text = self._body.decode()
        except UnicodeDecodeError as exc:
            raise SseParseError(f"the JSON response body is not UTF-8: {exc}") from None
        self._body = bytearray()
        return [SseEvent(text, JSON_BODY)]
