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

from cuca.errors import (
    ConfigurationError,
    ConnectError,
    ReadTimeout,
    StreamIncomplete,
    TransportError,
    http_status_error,
)
from cuca.retry import RetryPolicy, parse_retry_after
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
    retry: RetryPolicy | None = None,
) -> Stage:
    """Send each request and forward the response body, one batch per network read.

    Failures before the first body byte (connection errors, 408/409/429/5xx) are
    retried per ``retry``; a non-2xx status that is not retried (or retried too often)
    raises the :class:`~cuca.errors.HttpStatusError` of its kind with the body and the
    vendor's own message; httpx failures become the :class:`TransportError` of their
    kind (``ConnectError``, ``ReadTimeout``, ``StreamIncomplete`` for a body cut short).
    Leaving (by cancellation or because
    downstream stopped listening) closes the response.
    """
    policy = retry if retry is not None else RetryPolicy()

    async def transport(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            for request in batch:
                response = await _open(http, request, error_text, policy)
                await _forward(response, send, request.url)

    return transport


async def _open(
    http: httpx.AsyncClient,
    request: WireRequest,
    error_text: ErrorText,
    policy: RetryPolicy,
) -> httpx.Response:
    """The response to ``request`` once its status is 2xx, retrying what may be retried."""
    wire = _build(http, request)
    attempt = 0
    while True:
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
        retry_after = response.headers.get("retry-after")
        if attempt < policy.max_retries and policy.retries_status(status):
            await trio.sleep(policy.delay(attempt, retry_after))
            attempt += 1
            continue
        message = error_text(status, text)
        raise http_status_error(status, text, message, parse_retry_after(retry_after))


def _build(http: httpx.AsyncClient, request: WireRequest) -> httpx.Request:
    """The httpx request; what cannot be sent at all is a configuration error.

    The messages never quote a header value or the URL's credentials: a key with a
    stray newline must not end up in an error message.
    """
    try:
        body = request.body_bytes()
    except (UnicodeEncodeError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, UnicodeEncodeError) else type(exc).__name__
        raise ConfigurationError(f"the request body cannot be encoded: {reason}") from None
    for name, value in request.headers.items():
        if not value.isascii() or "\r" in value or "\n" in value:
            raise ConfigurationError(
                f"the {name} header holds a line break or a non-ASCII character (check the API key)"
            )
    try:
        return http.build_request(
            request.method, request.url, headers=dict(request.headers), content=body
        )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
        url = _safe_url(request.url)
        raise ConfigurationError(f"invalid URL {url}: {type(exc).__name__}") from None


def _safe_url(url: str) -> str:
    """``url`` without its query string and without any user:password part."""
    scheme, sep, rest = url.split("?", 1)[0].partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}{sep}{netloc.rpartition('@')[2]}{slash}{path}"


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
        raise _transport_error(exc, url, streaming=True) from exc
    finally:
        await response.aclose()


def _transport_error(exc: httpx.HTTPError, url: str, streaming: bool = False) -> TransportError:
    """The :class:`TransportError` of the right kind for an httpx failure; ``streaming``
    says whether the response body had started."""
    if isinstance(exc, httpx.ConnectError):
        return ConnectError(f"{_describe(exc)} ({_safe_url(url)})")
    if isinstance(exc, httpx.TimeoutException):
        kinds = {httpx.ConnectTimeout: ConnectError, httpx.ReadTimeout: ReadTimeout}
        return kinds.get(type(exc), TransportError)(f"timed out ({_describe(exc)})")
    if isinstance(exc, httpx.RemoteProtocolError):
        kind = StreamIncomplete if streaming else TransportError
        return kind(f"connection closed mid-response ({_describe(exc)})")
    if isinstance(exc, httpx.LocalProtocolError):  # its text may quote a header value
        return TransportError(f"{type(exc).__name__} ({_safe_url(url)})")
    return TransportError(f"{_describe(exc)} ({_safe_url(url)})")


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


MAX_DRAIN_READS = 16
"""Reads drained after the provider's end marker so the connection can be pooled; a
server still sending after that many is cut off."""


def decode_stage(new_decoder: Callable[[UnifiedRequest], Decoder], ctx: TurnContext) -> Stage:
    """Translate events into items with a fresh decoder; record the turn's summary.

    After the provider's end marker the rest of the body is drained unread, so the
    connection goes back to the pool.
    """

    async def decode(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        decoder: Decoder | None = None
        drained = 0
        try:
            async for batch in receive:
                if decoder is None:  # only now have the request hooks run
                    decoder = new_decoder(ctx.request)
                if decoder.finished:
                    drained += 1
                    if drained > MAX_DRAIN_READS:
                        break  # a server that goes on after its end marker: hang up
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
            if decoder is None:
                decoder = new_decoder(ctx.request)
            if ctx.error is None:
                tail = decoder.close()
                if tail:
                    await send.send(tail)
        finally:
            if decoder is not None:
                ctx.summary = decoder.summary()

    return decode
