"""A minimal adapter for pipeline tests: a tiny SSE dialect, no vendor involved.

Frames: ``data: T <text>`` is a Text block, ``data: E <msg>`` a non-fatal error item,
``data: F <msg>`` a fatal error, ``data: [DONE]`` the end marker. The adapter posts to
``{base_url}/fake`` and is served for ``ProviderEndpoint.custom("fake")``.
"""

from __future__ import annotations

from cuca import ProviderEndpoint, ProviderError, StreamIncomplete, Text, TurnSummary
from cuca.providers.base import ClientSettings, HttpRequest, Item, ProviderAdapter, StreamDecoder
from cuca.providers.registry import register_adapter
from cuca.stages.sse import SseEvent
from cuca.types import TokenUsage, UnifiedRequest

FAKE = ProviderEndpoint.custom("fake")


def frames(*texts: str, done: bool = True) -> bytes:
    body = b"".join(f"data: T {t}\n\n".encode() for t in texts)
    return body + (b"data: [DONE]\n\n" if done else b"")


class FakeDecoder(StreamDecoder):
    def __init__(self) -> None:
        self.finished = False
        self.count = 0

    def feed(self, event: SseEvent) -> list[Item]:
        kind, _, rest = event.data.partition(" ")
        if event.data == "[DONE]":
            self.finished = True
            return []
        if kind == "T":
            self.count += 1
            return [Text(rest)]
        if kind == "E":
            return [ProviderError("fake", rest)]
        if kind == "F":
            raise ProviderError("fake", rest)
        return []

    def close(self) -> list[Item]:
        if not self.finished:
            raise StreamIncomplete("stream ended before [DONE]")
        return []

    def summary(self) -> TurnSummary:
        return TurnSummary(usage=TokenUsage(1, self.count), finish_reason="stop")


class FakeAdapter(ProviderAdapter):
    endpoint = FAKE

    def __init__(self, settings: ClientSettings) -> None:
        self.base_url = settings.base_url or "http://127.0.0.1:9"
        self.api_key = settings.api_key

    def encode(self, request: UnifiedRequest) -> HttpRequest:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        body = {"model": request.model, "provider": str(request.provider)}
        return HttpRequest(f"{self.base_url}/fake", headers, body)

    def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
        return FakeDecoder()

    def error_message(self, status: int, body: str) -> str | None:
        return f"fake says: {body}" if body else None


register_adapter("fake", FakeAdapter)
