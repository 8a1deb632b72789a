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
from cuca.retry import RetryPolicy
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
    retry: RetryPolicy | None = None,
) -> Stage:
    """Send each request and forward the response body, one batch per network read.

    Failures before the first body byte (connection errors, 408/409/429/5xx) are
    retried per ``retry``; a non-2xx status that is not retried (or retried too often)
    raises :class:`HttpStatusError` with the body and the vendor's own message; httpx
    failures become :class:`TransportError`. Leaving (by cancellation or because
    downstream stopped listening) closes the response.
    """
    policy = retry if retry is not None else RetryPolicy()

    async def transport(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            for request in batch:
                response = await _open(http, request, error_text, timeout, policy)
                await _forward(response, send, request.url)

    return transport


async def _open(
    http: httpx.AsyncClient,
    request: WireRequest,
    error_text: ErrorText,
    timeout: httpx.Timeout | None,
    policy: RetryPolicy,
) -> httpx.Response:
    """The response to ``request`` once its status is 2xx, retrying what may be retried."""
    extensions = {} if timeout is None else {"timeout": timeout.as_dict()}
    body = request.body_bytes()
    attempt = 0
    while True:
        wire = http.build_request(
            request.method,
            request.url,
            headers=dict(request.headers),
            content=body,
            extensions=extensions,
        )
        try:
            response = await http.send(wire, stream=True)
        except httpx.HTTPError as exc:
            if attempt < policy.max_retries and _retryable(exc):
                await trio.sleep(policy.delay(attempt))
                attempt += 1
                continue
            raise _transport_error(exc, request.url) from exc
        if 200 <= response.status_code < 300:
            return response
        try:
            text = (await response.aread()).decode("utf-8", "replace")
        except httpx.HTTPError as exc:
            raise _transport_error(exc, request.url) from exc
        finally:
            await response.aclose()
        status = response.status_code
        if attempt < policy.max_retries and policy.retries_status(status):
            await trio.sleep(policy.delay(attempt, response.headers.get("retry-after")))
            attempt += 1
            continue
        raise HttpStatusError(status, text, error_text(status, text))


def _retryable(exc: httpx.HTTPError) -> bool:
    """Errors where the server cannot have started answering: safe to send again."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


async def _forward(response: httpx.Response, send: trio.MemorySendChannel[Any], url: str) -> None:
    try:
        chunks = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
        async with aclosing(chunks):
            async for chunk in chunks:
                await send.send([chunk])
    except httpx.HTTPError as exc:
        raise _transport_error(exc, url) from exc
    finally:
        await response.aclose()


def _transport_error(exc: httpx.HTTPError, url: str) -> TransportError:
    if isinstance(exc, httpx.TimeoutException):
        return TransportError(f"timed out ({_describe(exc)})")
    if isinstance(exc, httpx.RemoteProtocolError):
        return TransportError(f"connection closed mid-response ({_describe(exc)})")
    return TransportError(f"{_describe(exc)} ({url.split('?', 1)[0]})")


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
            try:
                for chunk in batch:
                    events += framer.feed(chunk)
            finally:  # events framed before an error still go on
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
