"""``tick``: a made-up wire format, a good adapter for it, and four broken ones.

The format is one JSON object per line: ``{"t": "text", "v": "Hel"}`` is a piece of text,
``{"t": "call", "id": ..., "name": ..., "args": {...}}`` a tool call, ``{"t": "end",
"usage": {"in": 3, "out": 5}}`` the end of the turn; a non-2xx answer carries
``{"err": "<message>"}``. The conformance kit's teeth are tested on the broken adapters:
each has one bug a real adapter could have, and the kit must catch and name it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from cuca import ProviderEndpoint, ProviderError, StreamIncomplete, Text, ToolCall, TurnSummary
from cuca.errors import SseParseError
from cuca.providers.base import (
    ClientSettings,
    HttpRequest,
    Item,
    ProviderAdapter,
    StreamDecoder,
    loads_json,
)
from cuca.providers.registry import register_adapter
from cuca.stages.sse import SseEvent
from cuca.testing.conformance import ANY_ID, Transcript
from cuca.types import TokenUsage, UnifiedRequest

TICK = ProviderEndpoint.custom("tick")


def lines(*frames: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(frame, ensure_ascii=False).encode() + b"\n" for frame in frames)


TRANSCRIPTS = [
    Transcript(
        "hello",
        lines(
            {"t": "text", "v": "Hel"},
            {"t": "text", "v": "lo, world "},
            {"t": "text", "v": "✓"},
            {"t": "end", "usage": {"in": 3, "out": 4}},
        ),
        [Text("Hello, world ✓")],
    ),
    Transcript(
        "tool_call",
        lines(
            {"t": "text", "v": "Let me look."},
            {"t": "call", "id": "c1", "name": "weather", "args": {"city": "Paris"}},
            {"t": "end", "usage": {"in": 9, "out": 12}},
        ),
        [Text("Let me look."), ToolCall(ANY_ID, "weather", {"city": "Paris"})],
    ),
]


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"err": message}).encode()


class LineFramer:
    """One event per non-empty line; a line split across reads waits for its end."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> list[SseEvent]:
        *complete, self._rest = (self._rest + data).split(b"\n")
        return [_event(line) for line in complete if line.strip()]

    def close(self) -> list[SseEvent]:
        rest, self._rest = self._rest, b""
        return [_event(rest)] if rest.strip() else []


def _event(line: bytes) -> SseEvent:
    try:
        return SseEvent(data=line.decode())
    except UnicodeDecodeError as exc:
        raise SseParseError(f"a tick line is not UTF-8: {line[:40]!r}") from exc


class TickDecoder(StreamDecoder):
    def __init__(self) -> None:
        self.finished = False
        self._usage: TokenUsage | None = None

    def feed(self, event: SseEvent) -> list[Item]:
        frame = loads_json(event.data, "tick")
        if not isinstance(frame, dict):
            raise ProviderError("tick", f"a frame is not an object: {event.data[:80]}")
        kind = frame.get("t")
        if kind == "text":
            return self.text(frame)
        if kind == "call":
            return self.call(frame)
        if kind == "end":
            self._usage = self.usage(frame)
            self.finished = True
        return []  # unknown kinds are skipped, as the format allows

    def text(self, frame: dict[str, Any]) -> list[Item]:
        value = frame.get("v")
        if not isinstance(value, str):
            raise ProviderError("tick", f"text that is not a string: {frame!r:.80}")
        return [Text(value)] if value else []

    def call(self, frame: dict[str, Any]) -> list[Item]:
        call_id, name, args = frame.get("id"), frame.get("name"), frame.get("args")
        if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(args, dict)):
            return [ProviderError("tick", f"malformed tool call: {frame!r:.120}")]
        return [ToolCall(call_id, name, args)]

    def usage(self, frame: dict[str, Any]) -> TokenUsage:
        usage = frame.get("usage")
        counts = [usage.get(key) if isinstance(usage, dict) else None for key in ("in", "out")]
        if not all(type(count) is int and count >= 0 for count in counts):
            raise ProviderError("tick", f"unusable usage: {usage!r:.80}")
        return TokenUsage(counts[0], counts[1])

    def close(self) -> list[Item]:
        if not self.finished:
            raise StreamIncomplete("the tick stream ended before its end line")
        return []

    def summary(self) -> TurnSummary:
        return TurnSummary(usage=self._usage, finish_reason="stop" if self.finished else None)


class TickAdapter(ProviderAdapter):
    endpoint = TICK

    def __init__(self, settings: ClientSettings) -> None:
        self.endpoint = settings.provider
        self.base_url = settings.base_url or "http://127.0.0.1:9"

    def encode(self, request: UnifiedRequest) -> HttpRequest:
        prompt = [{"role": m.role.value, "text": m.text()} for m in request.messages]
        return HttpRequest(f"{self.base_url}/tick", {}, {"model": request.model, "prompt": prompt})

    def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
        return TickDecoder()

    def new_framer(self) -> LineFramer:
        return LineFramer()

    def error_message(self, status: int, body: str) -> str | None:
        try:
            message = json.loads(body).get("err")
        except (ValueError, AttributeError):
            return None
        return message if isinstance(message, str) else None


# -- four broken adapters ----------------------------------------------------------------


class ReadByReadFramer(LineFramer):
    """Bug: decodes each network read on its own, so a character split across two reads
    is dropped; when that character is all of a text frame, the block is lost."""

    def feed(self, data: bytes) -> list[SseEvent]:
        return super().feed(data.decode("utf-8", "ignore").encode())


class CleanEndDecoder(TickDecoder):
    """Bug: a stream that ends before its end line ends cleanly."""

    def close(self) -> list[Item]:
        return []


class KeyErrorDecoder(TickDecoder):
    """Bug: trusts the frame's shape, so a malformed frame raises a bare KeyError."""

    def feed(self, event: SseEvent) -> list[Item]:
        frame = loads_json(event.data, "tick")
        if frame["t"] == "end":
            self.finished = True
            return []
        return self.text(frame) if frame["t"] == "text" else self.call(frame)


class LeakyDecoder(TickDecoder):
    """Bug: starts a helper thread that only `close` stops; a dropped turn never calls it."""

    def __init__(self) -> None:
        super().__init__()
        self._stop = threading.Event()
        threading.Thread(target=self._stop.wait, args=(5,), name="tick-heartbeat").start()

    def close(self) -> list[Item]:
        self._stop.set()
        return super().close()


def _variant(
    framer: type[LineFramer] = LineFramer, decoder: type[TickDecoder] = TickDecoder
) -> Any:
    class Variant(TickAdapter):
        def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
            return decoder()

        def new_framer(self) -> LineFramer:
            return framer()

    return Variant


BROKEN = {
    "tick-read-by-read": _variant(framer=ReadByReadFramer),
    "tick-clean-end": _variant(decoder=CleanEndDecoder),
    "tick-key-error": _variant(decoder=KeyErrorDecoder),
    "tick-leaky": _variant(decoder=LeakyDecoder),
}

register_adapter("tick", TickAdapter)
for _name, _factory in BROKEN.items():
    register_adapter(_name, _factory)
