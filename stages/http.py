"""The HTTP stages of a turn: adapter encode, transport, SSE parse, adapter decode.

Each is a thin transformer (:mod:`cuca.stages.stage`) around an I/O-free object (the
adapter's encoder, framer and decoder) except the transport, a source that owns the only
socket of the turn and produces each network read as one batch, so the per-stage cost
is paid per read, not per token.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing
from functools import partial
from typing import Protocol, TypeVar, cast

import attrs
import httpx
import trio

from cuca.errors import (
    ConfigurationError,
    ConnectError,
    HttpStatusError,
    PluginError,
    ReadTimeout,
    StreamIncomplete,
    TransportError,
)
from cuca.retry import RetryPolicy, connect_retries, parse_retry_after
from cuca.turn import EndOfTurn, Item
from cuca.types import UnifiedRequest

from .items import EncodedRequest, ResponseHead
from .opening import Opening
from .protocols import Framer, StreamDecoder, WireRequest
from .sse import SseEvent
from .stage import Source, Transform, Transformer

__all__ = [
    "Attempts",
    "Decode",
    "Encode",
    "SseParse",
    "decode_stage",
    "encode_stage",
    "openings",
    "sse_stage",
    "transport_stage",
]

In = TypeVar("In")
Out = TypeVar("Out")

StatusError = Callable[[int, str, "float | None"], HttpStatusError]
"""The adapter's error boundary: status, body and ``Retry-After`` seconds in, the
:class:`~cuca.errors.HttpStatusError` of the vendor's kind out."""


class Attempts(Protocol):
    """Sees every attempt of a turn's request: the turn's *during* seam (its gates: a
    rate limiter learns of a 429 the retry absorbed, holds the resend back, and reads
    the rate-limit headers of the answer itself)."""

    async def answered(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        """An attempt's head: a non-2xx status (retried or not; told before the wait
        that follows it), a 2xx sent again for an error in its stream, and the 2xx one
        passed on as the turn's head (told before it is)."""
        ...

    async def resending(self) -> None:
        """The request is about to be sent again (after a failed attempt)."""
        ...


class Encode(Transformer[UnifiedRequest, EncodedRequest]):
    """The ``encode`` point: each request paired with the adapter's HTTP request for it."""

    def __init__(self, encode: Callable[[UnifiedRequest], WireRequest]) -> None:
        self.encode = encode

    async def feed(self, batch: Sequence[UnifiedRequest], /) -> list[EncodedRequest]:
        encode = self.encode
        return [EncodedRequest(request, encode(request)) for request in batch]


def encode_stage(
    encode: Callable[[UnifiedRequest], WireRequest],
) -> Transform[UnifiedRequest, EncodedRequest]:
    """Pair each request with the adapter's HTTP request for it (:class:`Encode`)."""
    return Transform(partial(Encode, encode))


def transport_stage(
    http: httpx.AsyncClient,
    status_error: StatusError,
    retry: RetryPolicy | None = None,
    opening: Callable[[ResponseHead], Opening] | None = None,
    attempts: Attempts | None = None,
) -> Source[EncodedRequest, ResponseHead | bytes]:
    """Send each request; produce a :class:`ResponseHead`, then the body, one batch per
    network read (a source: see :mod:`cuca.stages.stage`).

    Failures before the response body (connection errors, 408/409/429/5xx) are
    retried per ``retry``; a non-2xx status that is not retried (or retried too often)
    raises the :class:`~cuca.errors.HttpStatusError` the adapter's ``status_error`` makes
    of it (its kind, the body, the vendor's own message, a context overflow); httpx
    failures become the :class:`TransportError` of their kind (``ConnectError``,
    ``ReadTimeout``, ``StreamIncomplete`` for a body cut short).

    With ``opening`` (the adapter's framer and decoder for a head: :func:`openings`),
    a 200 whose stream fails before its first item with an error the policy retries
    as a status (an in-stream overload or rate limit) is sent again too: the head and
    the first reads are held back until the :class:`Opening` has decided, and an
    attempt sent again is never passed on. Every retry of a request, for a status or in
    the stream, counts against the same ``max_retries``.

    The response is closed when the body ends, when the reader stops early (the decoder
    saw the end marker, an error, a cancellation: the iterator is closed) and on error.
    Closed early, it hangs up first and then runs httpx's body iterator to its end (it
    ends at once, by an error): every async generator of httpx and httpcore under it
    finishes then, none is left for trio's finalizer to close in a task of its own.
    ``attempts`` is told of every attempt's head, and of every resend.
    """
    policy = retry if retry is not None else RetryPolicy()

    async def transport(
        batch: Sequence[EncodedRequest],
    ) -> AsyncGenerator[Sequence[ResponseHead | bytes], None]:
        for encoded in batch:
            attempt = 0
            while True:
                response, attempt = await _open(
                    http, encoded.http, status_error, policy, attempt, attempts
                )
                url = encoded.http.url
                chunks = cast(AsyncGenerator[bytes, None], _body(response))
                wait: float | None = None
                try:
                    headers = tuple(response.headers.multi_items())
                    head = ResponseHead(encoded.request, response.status_code, headers)
                    held: list[bytes] = []
                    ended, failure = False, None
                    if opening is not None and attempt < policy.max_retries:
                        probe = opening(head)
                        ended, failure = await _hold(chunks, probe, held)
                        if failure is None:
                            wait = policy.resend_delay(probe.error, attempt)
                    if wait is None:  # this attempt is the answer
                        if attempts is not None:
                            await attempts.answered(head.status, head.headers)
                        yield [head]
                        for chunk in held:
                            yield [chunk]
                        if failure is not None:
                            raise failure
                        if not ended:
                            async for chunk in chunks:
                                yield [chunk]
                except httpx.HTTPError as exc:
                    raise _transport_error(exc, url, streaming=True) from exc
                finally:
                    await response.aclose()
                    await _run_out(chunks)
                if wait is None:
                    break
                if attempts is not None:
                    await attempts.answered(head.status, head.headers)
                await trio.sleep(wait)  # the failed attempt is closed: nothing is left open
                attempt += 1

    return Source(transport)


async def _hold(
    chunks: AsyncGenerator[bytes, None], probe: Opening, held: list[bytes]
) -> tuple[bool, httpx.HTTPError | None]:
    """Read the body into ``held`` until ``probe`` has decided: whether the body ended,
    and the read error that stopped it (raised once what came before is passed on)."""
    try:
        while not probe.decided:
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                probe.close()
                return True, None
            held.append(chunk)
            probe.feed(chunk)
    except httpx.HTTPError as exc:
        return False, exc
    return False, None


def openings(
    new_framer: Callable[[], Framer], new_decoder: Callable[[UnifiedRequest], StreamDecoder]
) -> Callable[[ResponseHead], Opening]:
    """The :class:`Opening` of an answer from the adapter's framer and decoder, built as
    :func:`sse_stage` and :func:`decode_stage` build theirs (for the transport)."""
    return lambda head: Opening(new_framer(), new_decoder(_as_answered(head)))


async def _run_out(chunks: AsyncGenerator[bytes, None]) -> None:
    """Run a hung-up response's body iterator to its end. Closing it instead (``aclose``)
    would end only the outermost of httpx's nested generators and leave the others to
    trio's finalizer; read once more after the response is closed, each one ends by the
    same ``ReadError``. Shielded and bounded: after the hang-up it does no I/O."""
    with trio.move_on_after(1) as scope:
        scope.shield = True
        async with aclosing(chunks):
            try:
                async for _ in chunks:
                    pass
            except httpx.HTTPError:
                pass


def _body(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body's bytes as each read gives them: decoded when the server compressed it,
    else the raw reads (one layer of generator less per read)."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    return response.aiter_raw() if encoding in ("", "identity") else response.aiter_bytes()


async def _open(
    http: httpx.AsyncClient,
    request: WireRequest,
    status_error: StatusError,
    policy: RetryPolicy,
    attempt: int = 0,
    attempts: Attempts | None = None,
) -> tuple[httpx.Response, int]:
    """The response to ``request`` once its status is 2xx, retrying what may be retried,
    and the retries used so far (``attempt`` of them before this call)."""
    wire = _build(http, request)
    while True:
        if attempt and attempts is not None:
            await attempts.resending()
        try:
            response = await http.send(wire, stream=True)
        except httpx.HTTPError as exc:
            if attempt < policy.max_retries and _retryable(exc):
                await trio.sleep(policy.backoff(attempt))
                attempt += 1
                continue
            raise _transport_error(exc, request.url) from exc
        if 200 <= response.status_code < 300:
            return response, attempt
        try:
            text = (await response.aread()).decode("utf-8", "replace")
        except httpx.HTTPError as exc:
            raise _transport_error(exc, request.url) from exc
        finally:
            await response.aclose()
        status = response.status_code
        if attempts is not None:
            await attempts.answered(status, tuple(response.headers.multi_items()))
        retry_after = response.headers.get("retry-after")
        wait = policy.delay(attempt, retry_after)
        if attempt < policy.max_retries and policy.retries_status(status) and wait is not None:
            await trio.sleep(wait)
            attempt += 1
            continue
        raise status_error(status, text, parse_retry_after(retry_after))


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
        built = http.build_request(
            request.method, request.url, headers=dict(request.headers), content=body
        )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
        url = _safe_url(request.url)
        raise ConfigurationError(f"invalid URL {url}: {type(exc).__name__}") from None
    if built.url.scheme not in ("http", "https"):
        url = _safe_url(request.url)
        raise ConfigurationError(f"invalid URL {url}: no http:// or https:// scheme")
    return built


def _safe_url(url: str) -> str:
    """``url`` without its query string and without any user:password part."""
    scheme, sep, rest = url.split("?", 1)[0].partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}{sep}{netloc.rpartition('@')[2]}{slash}{path}"


def _retryable(exc: httpx.HTTPError) -> bool:
    """Errors where the server cannot have started answering: safe to send again (a
    connection that could not be made at all, not within ``refused_moves_on``)."""
    if isinstance(exc, httpx.ConnectError):
        return connect_retries()
    return isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout)


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


class _Holding(Transformer[In, Out]):
    """A transformer that, when one item of a batch fails, returns what the items before
    it gave, and raises the error at its next call: items made before an error still
    reach the consumer, then the error ends the turn."""

    held: Exception | None = None

    def _raise_held(self) -> None:
        if self.held is not None:
            raise self.held


class SseParse(_Holding[ResponseHead | bytes, ResponseHead | SseEvent]):
    """The ``sse_parse`` point: response bytes split into events by the adapter's
    framer (SSE by default); the :class:`ResponseHead` passes through."""

    def __init__(self, new_framer: Callable[[], Framer]) -> None:
        self.framer = new_framer()

    async def feed(
        self, batch: Sequence[ResponseHead | bytes], /
    ) -> list[ResponseHead | SseEvent]:
        self._raise_held()
        feed = self.framer.feed
        events: list[ResponseHead | SseEvent] = []
        try:
            for chunk in batch:
                if isinstance(chunk, bytes):
                    events += feed(chunk)
                else:
                    events.append(chunk)
        except Exception as exc:
            if not events:
                raise
            self.held = exc
        return events

    async def end(self) -> list[ResponseHead | SseEvent]:
        self._raise_held()
        return list(self.framer.close())


def sse_stage(
    new_framer: Callable[[], Framer],
) -> Transform[ResponseHead | bytes, ResponseHead | SseEvent]:
    """Split response bytes into events with the adapter's framer (:class:`SseParse`)."""
    return Transform(partial(SseParse, new_framer))


def _as_answered(head: ResponseHead) -> UnifiedRequest:
    """The request as the server answered it: a server that ignored ``stream`` and sent
    one JSON document is decoded as the non-streamed form of the turn, not as a broken
    event stream."""
    request = head.request
    if request.stream:
        content_type = next((v for k, v in head.headers if k.lower() == "content-type"), "")
        if content_type.split(";")[0].strip().lower() == "application/json":
            return attrs.evolve(request, stream=False)
    return request


MAX_DRAIN_READS = 16
"""Reads drained after the provider's end marker so the connection can be pooled; a
server still sending after that many is cut off."""


class Decode(_Holding[ResponseHead | SseEvent, Item | EndOfTurn]):
    """The ``decode`` point: events translated into items by a decoder built from the
    :class:`ResponseHead`'s request; the :class:`~cuca.turn.EndOfTurn` once the body
    ended cleanly (naming ``endpoint``, the base URL the turn went to).

    After the provider's end marker the rest of the body is drained unread, so the
    connection goes back to the pool; a server still sending after
    :data:`MAX_DRAIN_READS` reads is cut off (the stage turns ``done``).
    """

    def __init__(
        self, new_decoder: Callable[[UnifiedRequest], StreamDecoder], endpoint: str | None
    ) -> None:
        self.new_decoder = new_decoder
        self.endpoint = endpoint
        self.decoder: StreamDecoder | None = None
        self.request: UnifiedRequest | None = None
        self.drained = 0

    async def feed(
        self, batch: Sequence[ResponseHead | SseEvent], /
    ) -> list[Item | EndOfTurn]:
        self._raise_held()
        decoder = self.decoder
        if decoder is not None and decoder.finished:
            self.drained += 1
            self.done = self.drained > MAX_DRAIN_READS
            return []
        items: list[Item | EndOfTurn] = []
        try:
            for event in batch:
                if isinstance(event, ResponseHead):
                    self.request = event.request
                    decoder = self.decoder = self.new_decoder(_as_answered(event))
                elif decoder is None:
                    raise PluginError("decode", "an event arrived before the ResponseHead")
                else:
                    items += decoder.feed(event)
                    if decoder.finished:
                        break
        except Exception as exc:
            if not items:
                raise
            self.held = exc
        return items

    async def end(self) -> list[Item | EndOfTurn]:
        self._raise_held()
        if self.decoder is None or self.request is None:
            raise StreamIncomplete("the response ended before it began")
        tail: list[Item | EndOfTurn] = [*self.decoder.close()]
        return [*tail, EndOfTurn(self.request, self.decoder.summary(), self.endpoint)]


def decode_stage(
    new_decoder: Callable[[UnifiedRequest], StreamDecoder], endpoint: str | None = None
) -> Transform[ResponseHead | SseEvent, Item | EndOfTurn]:
    """Translate events into items with a decoder built from each answer's head
    (:class:`Decode`)."""
    return Transform(partial(Decode, new_decoder, endpoint))


transport_error = _transport_error
"""The :class:`TransportError` of the right kind for an httpx failure (also used by the
calls outside a turn, :func:`cuca.backends.request_json`)."""
