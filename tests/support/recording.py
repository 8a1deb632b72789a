"""A pass-through httpx transport that keeps what went over the wire, so a test compares
what cuca reports with the bytes a real server sent, not with guesses."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx


class _Tee(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, record: bytearray) -> None:
        self._inner = inner
        self._record = record

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._record.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class RecordingTransport(httpx.AsyncBaseTransport):
    """Passes requests to the network and keeps every JSON request body sent
    (:attr:`sent`) and every response body received (:attr:`bodies`).

    `extra` keys are added to each JSON request body: llama-server's own parameters
    (``grammar``) or ones cuca's request has no field for.
    """

    def __init__(self, extra: dict[str, Any] | None = None) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.sent: list[dict[str, Any]] = []
        self.bodies: list[bytearray] = []
        self.closes: list[bool] = []  # whether each request asked for Connection: close
        self.extra = extra or {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.content:
            body = {**json.loads(request.content), **self.extra}
            self.sent.append(body)
            if self.extra:
                headers = {k: v for k, v in request.headers.items() if k != "content-length"}
                request = httpx.Request(
                    request.method,
                    request.url,
                    headers=headers,
                    json=body,
                    extensions=request.extensions,  # the client's timeouts ride here
                )
        self.closes.append(request.headers.get("connection") == "close")
        response = await self._inner.handle_async_request(request)
        record = bytearray()
        self.bodies.append(record)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, record),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def server_frames(body: bytes) -> list[dict[str, Any]]:
    """The JSON frames of a recorded event stream (by hand: no cuca code involved)."""
    frames = []
    for line in body.decode().splitlines():
        if line.startswith("data: {"):
            frames.append(json.loads(line[len("data: ") :]))
    return frames
