"""The ASGI application of ``cuca serve``: any backend behind the OpenAI chat and
Responses wires and the Anthropic Messages wire.

A request is read with bounds (size, nesting, the time its body may take), checked
against the server's keys in constant time, decoded by its wire's ``inbound`` into a
:class:`~cuca.types.UnifiedRequest`, and run as a turn through the backend its model
names (anything with ``generate_stream(request)``: a :class:`~cuca.CucaClient`, a pool,
a fallback). The turn's items are written back by the wire's ``outbound`` as they
arrive, one send per batch.

No byte is written before the turn's first item (or its end): an error before it is
answered with the wire's status and envelope, one after it inside the stream as the
wire sends one. A client that hangs up cancels the turn, before the first byte as
after it: the server watches ``http.disconnect`` beside the turn and cancels it. Once
the answer's last byte is handed to the server, the answer is whole: a hang-up from
then on (hypercorn itself reports one as it closes the finished response) cancels
nothing, and the turn ends as it ran (200 in the log, charged its usage).

Secrets never leave: error texts are scrubbed of the upstream keys the server holds,
and the log names requests, never their bodies or headers.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from cuca._nursery import background_nursery
from cuca.admission import Admission, estimate_tokens
from cuca.errors import ConfigurationError, CucaError
from cuca.plugins import TurnOutcome
from cuca.providers.anthropic.outbound import count_tokens_body
from cuca.providers.anthropic.outbound import models_body as anthropic_models
from cuca.providers.chat.outbound import models_body as openai_models
from cuca.providers.serving import Ending, Inbound, Item
from cuca.types import TokenCount, UnifiedRequest, UnifiedResponse

from .signing import ServerSignatures
from .wires import WIRES, Wire

if TYPE_CHECKING:
    from .keys import KeyLimits

__all__ = ["Backend", "HttpError", "Limits", "ServeApp"]

log = logging.getLogger("cuca.serve")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_POST_ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/messages": "anthropic",
    "/v1/responses": "responses",
}
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@attrs.frozen
class Backend:
    """What serves one model name: ``client`` (anything with ``generate_stream``, and
    ``count_tokens`` as :class:`~cuca.CucaClient` has: a client, a pool, a
    :class:`~cuca.FallbackClient`), the model name sent to it (``None``: the name the
    client asked for), and whether its token count is exact and local (the engine's:
    the Messages stream then announces ``input_tokens`` at ``message_start``).
    ``counter`` counts tokens where ``client`` cannot (a fallback: its first client);
    ``None``: the client counts."""

    client: Any
    model: str | None = None
    counts_exactly: bool = False
    counter: Any = None

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount:
        """The prompt's tokens, as the backend counts them."""
        counted: TokenCount = await (self.counter or self.client).count_tokens(request)
        return counted


@attrs.frozen
class Limits:
    """Bounds on what one request may cost the server before it is refused: the body's
    bytes (413), its JSON nesting (400), and the seconds its body may take to arrive
    (408: a client that never finishes its body holds nothing for long)."""

    max_body: int = 8 * 1024 * 1024
    max_depth: int = 64
    body_timeout: float = 30.0


class HttpError(ConfigurationError):
    """A request refused before it becomes a turn, with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _depth(value: Any, limit: int) -> int:
    """The nesting depth of a JSON value, counted without recursion (stops past
    ``limit``)."""
    deepest, level = 0, [(value, 1)]
    while level:
        item, depth = level.pop()
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            level.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            level.extend((v, depth + 1) for v in item)
    return deepest


def _not_json(constant: str) -> Any:
    """Python's json reads ``NaN`` and ``Infinity``; JSON has no such values, and a
    sampler given one would not say so: the body is refused as not JSON."""
    raise ValueError(f"{constant} is not JSON")


MAX_MESSAGE = 1024
"""The characters of an error message sent back: a refusal that quotes the client's
value (``reasoning_effort must be one of ..., not '...'``) does not send back a
megabyte the client sent."""


def _capped(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its ``error.message`` cut to :data:`MAX_MESSAGE` characters (the
    one place every wire's error envelope keeps it)."""
    error = body.get("error")
    if not isinstance(error, dict):
        return body
    message = error.get("message")
    if not isinstance(message, str) or len(message) <= MAX_MESSAGE:
        return body
    cut = f"{message[: MAX_MESSAGE - 40]}... ({len(message)} characters)"
    return {**body, "error": {**error, "message": cut}}


class _Disconnected(Exception):
    """The client hung up."""


class ServeApp:
    """The ASGI application.

    ``backends`` maps each model name a client may ask for to its :class:`Backend`
    (``"*"`` serves any other name). ``api_keys``: the keys a client must send (as
    ``Authorization: Bearer`` or ``x-api-key``); none, and the server takes any
    request. ``secrets`` are strings never to be sent back (the upstream keys).
    ``signatures`` seals thinking blocks (a random key by default). ``key_limits``
    gives each key its own rate limit and budget (:class:`~.keys.KeyLimits`; shared
    by replicas through its store).
    """

    def __init__(
        self,
        backends: Mapping[str, Backend],
        *,
        api_keys: Iterable[str] = (),
        secrets: Iterable[str] = (),
        signatures: ServerSignatures | None = None,
        limits: Limits | None = None,
        key_limits: KeyLimits | None = None,
    ) -> None:
        self.backends = dict(backends)
        self.key_limits = key_limits
        self._keys = tuple(k.encode() for k in api_keys if k)
        self._secrets = tuple(s.encode() for s in secrets if s)
        self.signatures = signatures or ServerSignatures()
        self.limits = limits or Limits()

    def __repr__(self) -> str:
        return f"ServeApp(models={sorted(self.backends)!r}, keys={len(self._keys)})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            await _Exchange(self, scope, receive, send).run()

    # -- what an exchange asks of the app ----------------------------------------------

    def authorized(self, headers: Mapping[str, str]) -> bytes | None:
        """The key the request carries if it is one of the server's (compared in constant
        time, every key compared whatever the result), ``b""`` for a server without
        keys, ``None`` when refused."""
        if not self._keys:
            return b""
        bearer = headers.get("authorization", "")
        offered = [headers.get("x-api-key", "")]
        if bearer[:7].lower() == "bearer ":
            offered.append(bearer[7:].strip())
        found = None
        for key in self._keys:
            for candidate in offered:
                if hmac.compare_digest(candidate.encode(), key):
                    found = key
        return found

    def admission(self, key: bytes, backend: Backend) -> Admission | None:
        """The turn's admission through ``key``'s own gates (``None`` without
        ``key_limits``), the prompt counted by the backend (its estimate when it
        cannot count)."""
        if self.key_limits is None:
            return None
        gates = self.key_limits.gates(key)

        async def count(request: UnifiedRequest) -> int:
            try:
                return (await backend.count_tokens(request)).tokens
            except CucaError:
                return estimate_tokens(request)

        return Admission(gates, count)

    def backend(self, model: str) -> Backend:
        found = self.backends.get(model) or self.backends.get("*")
        if found is None:
            served = ", ".join(sorted(m for m in self.backends if m != "*"))
            raise HttpError(404, f"model {model!r} is not served here (served: {served})")
        return found

    def scrub(self, data: bytes) -> bytes:
        """``data`` without any of the secrets the server holds."""
        for secret in self._secrets:
            data = data.replace(secret, b"<redacted>")
        return data


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class _Exchange:
    """One request and its answer."""

    def __init__(self, app: ServeApp, scope: Scope, receive: Receive, send: Send) -> None:
        self.app = app
        self.method = str(scope.get("method", "GET"))
        self.path = str(scope.get("path", "/")).rstrip("/") or "/"
        self.headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        self.receive = receive
        self._send = send
        self.started = False
        self.answered = False  # the last byte of the answer was handed to the server
        self.status = 0
        self.key = b""

    # -- answering ---------------------------------------------------------------------

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started, self.status = True, status
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, data: bytes, more: bool = False) -> None:
        self.answered = not more
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def json(self, status: int, value: Any, scrub: bool = False) -> None:
        data = json.dumps(value, ensure_ascii=False).encode()
        if scrub:
            data = self.app.scrub(data)
        await self.start(status, [*_JSON, (b"content-length", str(len(data)).encode())])
        await self.body(data)

    async def error(self, wire: Wire, error: BaseException) -> None:
        chosen = error.status if isinstance(error, HttpError) else None
        status, body = wire.error_body(error, chosen)
        await self.json(status, _capped(body), scrub=True)

    # -- the request -------------------------------------------------------------------

    def wire_for_errors(self) -> Wire:
        anthropic = self.path.startswith("/v1/messages") or "anthropic-version" in self.headers
        return WIRES["anthropic" if anthropic else "chat"]

    async def run(self) -> None:
        wire = self.wire_for_errors()
        try:
            await self._route(wire)
        except _Disconnected:
            self.status = 499
        except HttpError as error:
            await self.error(wire, error)
        log.info("%s %s %s", self.method, self.path, self.status)

    async def _route(self, wire: Wire) -> None:
        if self.path == "/health" and self.method == "GET":
            await self.json(200, {"status": "ok"})
            return
        key = self.app.authorized(self.headers)
        if key is None:
            raise HttpError(401, "invalid or missing API key")
        self.key = key
        if self.path == "/v1/models" and self.method == "GET":
            names = sorted(m for m in self.app.backends if m != "*")
            anthropic = "anthropic-version" in self.headers
            await self.json(200, anthropic_models(names) if anthropic else openai_models(names))
            return
        counting = self.path == "/v1/messages/count_tokens"
        name = "anthropic" if counting else _POST_ROUTES.get(self.path)
        if name is None:
            raise HttpError(404, f"no route {self.method} {self.path}")
        if self.method != "POST":
            raise HttpError(405, f"{self.path} takes POST")
        wire = WIRES[name]
        body = await self._read_json()
        try:
            if counting:
                await self._count(body)
            else:
                await self._turn(wire, body)
        except HttpError:
            raise
        except CucaError as error:
            if self.started:
                raise
            await self.error(wire, error)

    async def _read_json(self) -> Any:
        limits = self.app.limits
        declared = self.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_body:
            raise HttpError(413, f"the body is over {limits.max_body} bytes")
        data = bytearray()
        with trio.move_on_after(limits.body_timeout) as waited:
            more = True
            while more:
                message = await self.receive()
                if message["type"] == "http.disconnect":
                    raise _Disconnected
                data += message.get("body", b"")
                more = bool(message.get("more_body"))
                if len(data) > limits.max_body:
                    raise HttpError(413, f"the body is over {limits.max_body} bytes")
        if waited.cancelled_caught:
            raise HttpError(408, f"the body did not arrive within {limits.body_timeout:g} s")
        try:
            value = json.loads(data, parse_constant=_not_json)
        except (ValueError, RecursionError):
            raise HttpError(400, "the body is not JSON") from None
        if _depth(value, limits.max_depth) > limits.max_depth:
            raise HttpError(400, f"the body nests deeper than {limits.max_depth} levels")
        return value

    # -- a turn ------------------------------------------------------------------------

    async def _count(self, body: Any) -> None:
        from cuca.providers.anthropic.inbound import decode

        wire = WIRES["anthropic"]
        inbound = decode(body, wire.signatures(self.app.signatures), counting=True)
        backend = self.app.backend(inbound.request.model)
        request = _for_backend(inbound, backend).request
        count = await self._watched(lambda: backend.count_tokens(request))
        await self.json(200, count_tokens_body(count.tokens))

    async def _turn(self, wire: Wire, body: Any) -> None:
        signatures = wire.signatures(self.app.signatures)
        inbound = wire.decode(body, signatures)
        model = inbound.request.model
        backend = self.app.backend(model)
        inbound = _for_backend(inbound, backend)
        admission = self.app.admission(self.key, backend)
        if admission is None:
            await self._run(wire, inbound, backend, model, signatures)
            return
        await self._watched(lambda: admission.admit(inbound.request))
        end = TurnOutcome("cancelled")
        try:
            end = await self._run(wire, inbound, backend, model, signatures)
        except _Disconnected:
            raise  # settled as cancelled: a turn cut short is charged its reservation
        except Exception as error:
            end = TurnOutcome("error", error=error)
            raise
        finally:
            await admission.settle(end)

    async def _run(
        self, wire: Wire, inbound: Inbound, backend: Backend, model: str, signatures: Any
    ) -> TurnOutcome:
        """Run the turn and answer it, streamed or whole; how it ended."""
        if not inbound.request.stream:
            # the backend streams either way: a whole answer is the stream's items
            # accumulated, so both classify the same text the same way (seed 004, 1)
            streamed = attrs.evolve(inbound.request, stream=True)
            items, response = await self._watched(lambda: _collect(backend, streamed))
            await self.json(200, wire.whole(items, _ending(response), model, signatures))
            return TurnOutcome("ok", response) if response is not None else TurnOutcome("error")
        end: TurnOutcome = await self._watched(
            lambda: self._stream(wire, inbound, backend, model, signatures)
        )
        return end

    async def _watched(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``work`` while watching for the client's hang-up, which cancels it unless
        the answer's last byte was already handed to the server: hypercorn puts
        ``http.disconnect`` in the queue while it sends that byte (it closes the
        finished response), and a client may hang up as soon as it has read
        ``[DONE]``; the answer was whole either way."""
        result: list[Any] = []
        hung_up = False

        async def watch(cancel: trio.CancelScope) -> None:
            nonlocal hung_up
            while (await self.receive())["type"] != "http.disconnect":
                pass
            if not self.answered:
                hung_up = True
                cancel.cancel()

        with trio.CancelScope() as scope:
            async with background_nursery() as nursery:
                nursery.start_soon(watch, scope)
                result.append(await work())
        if hung_up and not result:
            raise _Disconnected
        return result[0]

    async def _stream(
        self, wire: Wire, inbound: Inbound, backend: Backend, model: str, signatures: Any
    ) -> TurnOutcome:
        """Write the turn as the wire streams it; how it ended, for the key's gates."""
        writer = wire.writer(model, inbound, signatures)
        request = inbound.request
        input_tokens = None
        if wire.announces_input and backend.counts_exactly:
            input_tokens = (await backend.count_tokens(request)).tokens
        pending = writer.open(input_tokens)
        try:
            async with backend.client.generate_stream(request) as stream:
                while True:
                    try:
                        batch = await stream.receive_batch()
                    except StopAsyncIteration:
                        break
                    data = b"".join(writer.write(item) for item in _logged(batch))
                    if not data:
                        continue
                    if not self.started:
                        await self.start(200, _SSE)
                        data, pending = pending + data, b""
                    await self.body(data, more=True)
                    if getattr(writer, "failed", False):
                        break  # the wire could not carry an item: the turn ends here
                response = stream.response
            tail = writer.close(_ending(response))
            end = TurnOutcome("ok", response) if response is not None else TurnOutcome("error")
        except CucaError as error:
            if not self.started:
                raise
            tail = self.app.scrub(writer.fail(error))
            end = TurnOutcome("error", error=error)
        if not self.started:
            await self.start(200, _SSE)
        await self.body(pending + tail)
        return end


def _for_backend(inbound: Inbound, backend: Backend) -> Inbound:
    if backend.model is None or backend.model == inbound.request.model:
        return inbound
    return attrs.evolve(inbound, request=attrs.evolve(inbound.request, model=backend.model))


def _logged(batch: Sequence[Item]) -> Sequence[Item]:
    for item in batch:
        if isinstance(item, CucaError):
            log.warning("turn item error: %s", type(item).__name__)
    return batch


def _ending(response: UnifiedResponse | None) -> Ending:
    return Ending.of(response) if response is not None else Ending()


async def _collect(
    backend: Backend, request: UnifiedRequest
) -> tuple[list[Item], UnifiedResponse | None]:
    items: list[Item] = []
    async with backend.client.generate_stream(request) as stream:
        async for item in stream:
            items.append(item)
        response: UnifiedResponse | None = stream.response
    return items, response
