"""What a turn runs on: a backend declares its points, builds their stages for one turn,
counts a prompt's tokens and knows a model's window.

| backend | what it holds | its points | counting, the window |
|---|---|---|---|
| :class:`HttpBackend` | a provider adapter and the client's one httpx pool | ``encode``, ``transport``, ``sse_parse``, ``decode`` | the adapter's routes (``count_tokens``, ``/props``...), else an estimate and genai-prices' data |
| :class:`LocalBackend` | a :class:`~cuca.engine.LocalModel` | ``engine``, ``output_parse`` | the engine's own rendering and tokenizer; the loaded ``n_ctx`` |

The turn (:mod:`cuca.seams`) adds what is not the backend's: the hook points around
them, the user's stages, and the seams. A backend knows no feature: it is told of the
attempts of a request only through the :class:`Heads` it is given, to which the HTTP
backend hands each attempt's head with what its adapter reads in the headers.
"""  # noqa: E501

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import httpx
import trio

from .errors import ConfigurationError, JsonError
from .turn import AttemptHead
from .types import ModelInfo, ProviderEndpoint, TokenCount, UnifiedRequest

if TYPE_CHECKING:
    from cuca.batch_wire import WireCall
    from cuca.engine.model import LocalModel
    from cuca.providers.base import ClientSettings, HttpRequest, ProviderAdapter
    from cuca.stages.http import StatusError
    from cuca.stages.points import Point
    from cuca.stages.protocols import WireRequest
    from cuca.stages.stage import Built

    from .retry import RetryPolicy
    from .vectors import EmbeddingRoute

__all__ = ["Backend", "Heads", "HttpBackend", "LocalBackend", "request_call", "request_json"]


class Heads(Protocol):
    """What a turn's *during* seam is told of its request's attempts (its gates)."""

    async def head(self, head: AttemptHead) -> None:
        """An attempt's head: each non-2xx answer, then the 2xx one."""
        ...

    async def resending(self) -> None:
        """The request is about to be sent again."""
        ...


@attrs.frozen
class TurnOptions:
    """A turn's own options for its backend: the retry policy (``None``: the
    backend's) and extra headers over the client's."""

    retry: RetryPolicy | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)


class Backend(Protocol):
    """What a turn runs on (see the module)."""

    points: tuple[Point[Any, Any], ...]
    """Every built-in point of its turns, in order (hooks included)."""
    items: Point[Any, Any]
    """The point whose output is the turn's blocks: a replay source takes the place of
    every point up to it."""
    endpoint: str | None
    """Where its turns go (the base URL), for the response and the cache."""

    def stages(
        self, options: TurnOptions, heads: Heads | None
    ) -> dict[Point[Any, Any], Built]: ...

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount: ...

    async def model_info(self, model: str = "") -> ModelInfo: ...

    async def aclose(self) -> None: ...


def _merged_headers(client: Mapping[str, str], turn: Mapping[str, str]) -> dict[str, str]:
    """The client's extra headers, then the turn's: a name given for the turn (in any
    case) replaces the client's."""
    names = {name.lower() for name in turn}
    return {**{k: v for k, v in client.items() if k.lower() not in names}, **turn}


@attrs.frozen
class _Attempts:
    """The transport's :class:`~cuca.stages.http.Attempts`, told to ``heads`` with what
    the adapter reads in each head's headers."""

    heads: Heads
    read: Callable[[Sequence[tuple[str, str]]], Any]

    async def answered(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        await self.heads.head(AttemptHead(status, tuple(headers), self.read(headers)))

    async def resending(self) -> None:
        await self.heads.resending()


class HttpBackend:
    """A provider over HTTP: its adapter (resolved on first use, so a setting that
    cannot work fails the turn, not the constructor) and the client's one connection
    pool (created on first use unless given; closed by :meth:`aclose` only if owned)."""

    def __init__(
        self,
        settings: ClientSettings,
        *,
        headers: Mapping[str, str],
        retry: RetryPolicy,
        timeout: httpx.Timeout,
        http: httpx.AsyncClient | None = None,
        endpoint: str | None = None,
    ) -> None:
        from cuca.stages.points import DECODE, HTTP_PIPELINE

        self.points = HTTP_PIPELINE
        self.items = DECODE
        self.settings = settings
        self.headers = dict(headers)
        self.retry = retry
        self.endpoint = settings.base_url if endpoint is None else endpoint
        self._timeout = timeout
        self._http = http
        self._own_http = http is None
        self._adapter: ProviderAdapter | None = None
        self._closed = False

    def adapter(self) -> ProviderAdapter:
        """The provider adapter (resolved once)."""
        if self._adapter is None:
            from cuca.providers.registry import adapter_for

            self._adapter = adapter_for(self.settings)
        return self._adapter

    def http(self) -> httpx.AsyncClient:
        """The connection pool every turn and call of this backend shares."""
        if self._closed:
            raise ConfigurationError("the client is closed")
        if self._http is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
            # trust_env=False: the library reads no environment variable (no proxy
            # settings, no .netrc); pass http_client= to choose otherwise
            self._http = httpx.AsyncClient(timeout=self._timeout, limits=limits, trust_env=False)
        return self._http

    def member(self, url: str) -> HttpBackend:
        """The backend of one server of a pool (``base_url=[...]``) of this provider:
        this one's connections shared (created now), no retries of its own (a failed
        attempt moves to another server), and this one's endpoint (every URL: a cached
        answer serves the whole pool)."""
        from .retry import RetryPolicy

        return HttpBackend(
            attrs.evolve(self.settings, base_url=url),
            headers=self.headers,
            retry=RetryPolicy.never(),
            timeout=self._timeout,
            http=self.http(),
            endpoint=self.endpoint,
        )

    def stages(
        self, options: TurnOptions, heads: Heads | None
    ) -> dict[Point[Any, Any], Built]:
        """The stages of ``encode``, ``transport``, ``sse_parse`` and ``decode`` for one
        turn; ``heads`` is told of every attempt (what the adapter reads in its headers
        included)."""
        from cuca.providers.base import with_headers
        from cuca.stages.http import (
            decode_stage,
            encode_stage,
            openings,
            sse_stage,
            transport_stage,
        )
        from cuca.stages.points import DECODE, ENCODE, SSE_PARSE, TRANSPORT

        adapter = self.adapter()
        extra = _merged_headers(self.headers, options.headers)
        encode = adapter.encode
        if extra:
            encode = lambda request: with_headers(adapter.encode(request), extra)  # noqa: E731
        attempts = None if heads is None else _Attempts(heads, adapter.rate_limits)
        retry = options.retry or self.retry
        opening = openings(adapter.new_framer, adapter.new_decoder)
        return {
            ENCODE: encode_stage(encode),
            TRANSPORT: transport_stage(self.http(), adapter.status_error, retry, opening, attempts),
            SSE_PARSE: sse_stage(adapter.new_framer),
            DECODE: decode_stage(adapter.new_decoder, self.endpoint_url),
        }

    @property
    def endpoint_url(self) -> str | None:
        """The base URL a turn of this backend goes to (a pool member's own)."""
        return self.settings.base_url

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount:
        """The adapter's count of ``request``'s prompt (exact on llama.cpp, Anthropic and
        Gemini; tiktoken's estimate for the OpenAI family)."""
        return await self.adapter().count_tokens(request, self.request_json)

    async def model_info(self, model: str = "") -> ModelInfo:
        """What the server says of ``model``'s window, else genai-prices' data."""
        found = await self.adapter().model_info(model, self.request_json)
        if found is not None:
            return found
        from .cost import model_window

        return model_window(self.settings.provider, model)

    def embedding_route(self) -> EmbeddingRoute:
        """The wire's embedding route (``providers/<wire>/embeddings.py``); a
        ``ConfigurationError`` where the server has none."""
        return self.adapter().embedding_route()

    async def request_json(self, wire: HttpRequest, heads: Heads | None = None) -> Any:
        """Send one small request outside a turn (the client's extra headers on it) and
        return the 2xx answer's JSON; ``heads`` (an embedding request's gates) is told
        the answer's head, 2xx or not, with what the adapter reads in its headers, as a
        turn's transport tells its own."""
        from cuca.providers.base import with_headers

        adapter = self.adapter()
        answered = None if heads is None else _Attempts(heads, adapter.rate_limits).answered
        return await request_json(
            self.http(), with_headers(wire, self.headers), adapter.status_error, answered
        )

    async def batch_call(self, call: WireCall) -> Any:
        """Send one call of a batch job through the connection pool (the client's extra
        headers on it; see :func:`request_call`)."""
        status_error = self.adapter().status_error
        return await request_call(self.http(), call, status_error, self.headers)

    async def aclose(self) -> None:
        """Close the connection pool, if this backend created it."""
        self._closed = True
        if self._http is not None and self._own_http:
            await self._http.aclose()
        self._http = None


class LocalBackend:
    """The in-process engine: a :class:`~cuca.engine.LocalModel` (checked when a turn
    or a call needs it, so the client can be built before the model is loaded)."""

    endpoint: str | None = None

    def __init__(self, model: LocalModel | None, provider_config: Any = None) -> None:
        from cuca.stages.points import LOCAL_PIPELINE, OUTPUT_PARSE

        self.points = LOCAL_PIPELINE
        self.items = OUTPUT_PARSE
        self.model = model
        self.provider_config = provider_config

    def local(self) -> LocalModel:
        """The model (a ``ConfigurationError`` when the client was given none)."""
        return self._model()

    def adapter(self) -> ProviderAdapter:
        """Refused with a ``ConfigurationError``: the engine is no wire."""
        raise ConfigurationError("the local engine has no provider adapter")

    def member(self, url: str) -> HttpBackend:
        """Refused with a ``ConfigurationError``: a pool's servers are HTTP servers."""
        raise ConfigurationError(
            "a pool needs one base URL or more, on an HTTP provider: the local engine has none"
        )

    def embedding_route(self) -> EmbeddingRoute:
        """The model's embedding mode (:mod:`cuca.engine.embedding`)."""
        return self._model().embedding_route()

    def _model(self) -> LocalModel:
        if self.model is None:
            raise ConfigurationError("the local provider requires local_model=LocalModel")
        return self.model

    def stages(
        self, options: TurnOptions, heads: Heads | None
    ) -> dict[Point[Any, Any], Built]:
        """The ``engine`` and ``output_parse`` stages for one turn on the model."""
        from cuca.engine.worker import turn_stages
        from cuca.providers.registry import check_provider_config
        from cuca.stages.points import ENGINE, OUTPUT_PARSE

        model = self._model()
        check_provider_config(ProviderEndpoint.LOCAL, self.provider_config)
        engine, output_parse = turn_stages(model)
        return {ENGINE: engine, OUTPUT_PARSE: output_parse}

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount:
        """Exact: the turn's own rendering and the model's tokenizer."""
        model = self._model()
        tokens = await trio.to_thread.run_sync(model.tokenize_prompt, request)
        return TokenCount(len(tokens), exact=True, method="local engine")

    async def model_info(self, model: str = "") -> ModelInfo:
        """The loaded ``n_ctx`` and the window the model was trained with."""
        local = self._model()
        name = model or local.path.name
        return ModelInfo(
            name, local.n_ctx, trained_context=local.trained_context, source="local engine"
        )

    async def request_json(self, wire: object, heads: object = None) -> Any:
        """The engine sends no HTTP request (its embedding route computes in place)."""
        raise ConfigurationError("the local engine sends no HTTP request")

    async def aclose(self) -> None:
        """Nothing to close: the model is the caller's."""


async def request_json(
    http: httpx.AsyncClient,
    request: WireRequest,
    status_error: StatusError,
    answered: Callable[[int, Sequence[tuple[str, str]]], Awaitable[None]] | None = None,
) -> Any:
    """One JSON request outside a turn (counting a prompt's tokens, reading a server's
    window, an embedding): sent through the backend's pool (a GET carries no body), the
    2xx answer's JSON returned; any other status raises the adapter's typed error (with
    the answer's ``Retry-After``), a failed connection the same
    :class:`~cuca.errors.TransportError` kinds a turn would. ``answered`` is told the
    answer's status and headers first, whatever the status."""
    from cuca.stages.http import transport_error

    content = None if request.method == "GET" else request.body_bytes()
    try:
        response = await http.request(
            request.method, request.url, headers=dict(request.headers), content=content
        )
    except httpx.HTTPError as exc:
        raise transport_error(exc, request.url) from exc
    if answered is not None:
        await answered(response.status_code, tuple(response.headers.multi_items()))
    text = response.text
    if not 200 <= response.status_code < 300:
        from .retry import parse_retry_after

        retry_after = parse_retry_after(response.headers.get("retry-after"))
        raise status_error(response.status_code, text, retry_after)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise JsonError(
            f"{request.url} answered with a body that is not JSON: {text[:200]!r}"
        ) from exc


async def request_call(
    http: httpx.AsyncClient, call: WireCall, status_error: StatusError, headers: Mapping[str, str]
) -> Any:
    """Send one call of a batch job (``headers``: the client's extra ones, added) and
    return the 2xx answer: its bytes when ``call.raw``, else its JSON."""
    sent = {**call.headers, **headers}
    files = data = content = None
    if call.upload is not None:
        upload = call.upload
        files = {upload.name: (upload.filename, upload.content, upload.content_type)}
        data = dict(upload.fields)
    elif call.body is not None:
        content = json.dumps(call.body, ensure_ascii=False, separators=(",", ":")).encode()
        sent["content-type"] = "application/json"
    try:
        response = await http.request(
            call.method, call.url, headers=sent, content=content, files=files, data=data
        )
    except httpx.HTTPError as exc:
        from cuca.stages.http import transport_error

        raise transport_error(exc, call.url) from exc
    if not 200 <= response.status_code < 300:
        from .retry import parse_retry_after

        retry_after = parse_retry_after(response.headers.get("retry-after"))
        raise status_error(response.status_code, response.text, retry_after)
    if call.raw:
        return response.content
    try:
        return json.loads(response.text)
    except (ValueError, RecursionError) as exc:
        raise JsonError(
            f"{call.url} answered with a body that is not JSON: {response.text[:200]!r}"
        ) from exc

