"""The HTTP stages of a turn: adapter encode, transport, SSE parse, adapter decode.

Each is a thin actor around an I/O-free object (the adapter's encoder, framer and
decoder) except the transport, which owns the only socket of the turn. A channel message
is what one network read produced, so the per-hop cost is paid per read, not per token.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any, cast

import httpx
import trio

from cuca.errors import HttpStatusError, TransportError
from cuca.types import UnifiedRequest

from .context import Stage, TurnContext
from .protocols import Decoder, Framer, WireRequest

__all__ = ["decode_stage", "encode_stage", "sse_stage", "transport_stage"]

ErrorText = Callable[[int, str], "str | None"]


def encode_stage(encode: Callable[[UnifiedRequest], WireRequest]) -> Stage:
    """Turn each request into the adapter's HTTP request."""

    async def encode_requests(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            await send.send([encode(request) for request in batch])

    return encode_requests


def transport_stage(
    http: httpx.AsyncClient,
    error_text: ErrorText,
    timeout: httpx.Timeout | None = None,
) -> Stage:
    """Send each request and forward the response body, one batch per network read.

    A non-2xx status raises :class:`HttpStatusError` with the body and the vendor's own
    message; httpx failures become :class:`TransportError`. Leaving (by cancellation or
    because downstream stopped listening) closes the response, so the connection is
    never left half-read in the pool.
    """

    async def transport(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            for request in batch:
                await _exchange(http, request, send, error_text, timeout)

    return transport


async def _exchange(
    http: httpx.AsyncClient,
    request: WireRequest,
    send: trio.MemorySendChannel[Any],
    error_text: ErrorText,
    timeout: httpx.Timeout | None,
) -> None:
    extensions = {} if timeout is None else {"timeout": timeout.as_dict()}
    wire = http.build_request(
        request.method,
        request.url,
        headers=dict(request.headers),
        content=request.body_bytes(),
        extensions=extensions,
    )
    try:
        response = await http.send(wire, stream=True)
        try:
            if not 200 <= response.status_code < 300:
                body = (await response.aread()).decode("utf-8", "replace")
                raise HttpStatusError(
                    response.status_code, body, error_text(response.status_code, body)
                )
            chunks = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
            async with aclosing(chunks):
                async for chunk in chunks:
                    await send.send([chunk])
        finally:
            await response.aclose()
    except httpx.TimeoutException as exc:
        raise TransportError(f"timed out ({_describe(exc)})") from exc
    except httpx.RemoteProtocolError as exc:
        raise TransportError(f"connection closed mid-response ({_describe(exc)})") from exc
    except httpx.HTTPError as exc:
        raise TransportError(f"{_describe(exc)} ({request.url})") from exc


def _describe(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


def sse_stage(new_framer: Callable[[], Framer]) -> Stage:
    """Split response bytes into events with the adapter's framer (SSE by default)."""

    async def sse_parse(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        framer = new_framer()
        async for batch in receive:
            events: list[Any] = []
            for chunk in batch:
                events += framer.feed(chunk)
            if events:
                await send.send(events)
        tail = framer.close()
        if tail:
            await send.send(tail)

    return sse_parse


def decode_stage(new_decoder: Callable[[UnifiedRequest], Decoder], ctx: TurnContext) -> Stage:
    """Translate events into items with a fresh decoder; record the turn's summary.

    After the provider's end marker the rest of the body is drained unread, so the
    connection goes back to the pool.
    """

    async def decode(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        decoder = new_decoder(ctx.request)
        try:
            async for batch in receive:
                if decoder.finished:
                    continue
                items: list[Any] = []
                try:
                    for event in batch:
                        items += decoder.feed(event)
                        if decoder.finished:
                            break
                finally:  # items decoded before an error still reach the consumer
                    if items:
                        await send.send(items)
            if ctx.error is None:
                tail = decoder.close()
                if tail:
                    await send.send(tail)
        finally:
            ctx.summary = decoder.summary()

    return decode
