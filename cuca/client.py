"""The client: one connection pool, one provider, a stage pipeline per turn."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Unpack

import attrs
import httpx
import sniffio

from ._block import TurnBlock, turn_block
from ._checks import kind, optional, seconds
from .errors import ConfigurationError
from .plugins import CucaPlugin
from .stream import Completion, PendingResponse, ResponseStream, collect
from .types import ModelInfo, ProviderEndpoint, TokenCount, UnifiedRequest

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from cuca.batches import BatchJob, BatchPolling
    from cuca.batches.job import BatchBackend
    from cuca.embeddings import Embeddings
    from cuca.engine.model import LocalModel
    from cuca.providers.base import ProviderAdapter
    from cuca.routing.pool import Pool, PoolPolicy
    from cuca.stages.pipeline import Pipeline
    from cuca.store import Store
    from cuca.tools.loop import ToolLoopOptions, ToolLoopStream
    from cuca.tools.tool import Tool
    from cuca.turn import Insertion

    from .admission import TurnGate, TurnReplay
    from .backends import HttpBackend, LocalBackend
    from .retry import RetryPolicy
    from .seams import BackendTurns
    from .vectors import Pooling

__all__ = ["CucaClient", "PendingResponse", "Timeouts"]


@attrs.frozen
class Timeouts:
    """Optional limits, in seconds; ``None`` means no limit (the default everywhere).

    ``connect``, ``read``, ``write`` and ``pool`` are httpx's per-operation timeouts;
    ``total`` is a deadline for a whole turn, from the first byte sent to the last
    block received.
    """

    connect: float | None = attrs.field(default=None, validator=optional(seconds))
    read: float | None = attrs.field(default=None, validator=optional(seconds))
    write: float | None = attrs.field(default=None, validator=optional(seconds))
    pool: float | None = attrs.field(default=None, validator=optional(seconds))
    total: float | None = attrs.field(default=None, validator=optional(seconds))

    def httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


def _timeouts(value: Timeouts | float | None) -> Timeouts:
    if value is None:
        return Timeouts()
    if isinstance(value, Timeouts):
        return value
    return Timeouts(connect=value, read=value, write=value, pool=value)


def _check_client(provider: object, base_url: object) -> None:
    """Refuse, before any I/O, a provider or base URL that cannot work."""
    if not isinstance(provider, ProviderEndpoint):
        raise ConfigurationError(
            f"provider must be a ProviderEndpoint, not {kind(provider)}: write "
            "ProviderEndpoint.OPENAI, or ProviderEndpoint.parse('openai')"
        )
    if base_url is None or base_url == "":  # empty: unset, as the seeds read it
        return
    urls = [base_url] if isinstance(base_url, str) else base_url
    if not isinstance(urls, Sequence) or not all(isinstance(url, str) for url in urls):
        raise ConfigurationError(
            f"base_url must be a string or a list of strings, not {kind(base_url)}"
        )
    for url in urls:
        if not url.lower().startswith(("http://", "https://")):
            raise ConfigurationError(
                f"base_url {url.split('@')[-1]!r} has no http:// or https:// scheme"
            )


def _from_environment(
    provider: ProviderEndpoint, base_url: str | Sequence[str] | None, api_key: str | None
) -> tuple[str | Sequence[str] | None, str | None]:
    """The base URL and key not given, from the vendor's own variables (declared per
    endpoint in :mod:`cuca.providers.table`); what was given always wins, and
    ``api_key=""`` stays "no key"."""
    from cuca.providers.table import env_base_url, env_key

    if base_url is None or base_url == "":
        base_url = env_base_url(provider.kind) or base_url
        _check_client(provider, base_url)
    if api_key is None:
        api_key = env_key(provider.kind)
    return base_url, api_key


def _checked_headers(headers: object, provider: ProviderEndpoint) -> dict[str, str]:
    """Extra headers as given (``None``: none); a ``ConfigurationError`` for anything
    but a mapping of strings to strings, or for the local engine, which sends none."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in headers.items()
    ):
        raise ConfigurationError(
            "headers must be a mapping of header names to strings, not "
            f"{type(headers).__name__}"  # never the values: a header may hold a secret
        )
    if headers and provider == ProviderEndpoint.LOCAL:
        raise ConfigurationError("headers= is for HTTP providers: the local engine sends none")
    return dict(headers)


def _require_trio() -> None:
    """Refuse to start a turn outside trio, with what to do instead.

    cuca is built on trio's structured concurrency (nurseries, cancel scopes, memory
    channels, ``trio.to_thread``); under another event loop trio fails deep inside with
    an ``AttributeError``. An asyncio program reaches cuca through trio-asyncio.
    """
    try:
        library: str | None = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    if library != "trio":
        raise ConfigurationError(
            f"cuca runs under trio, not {library or 'this event loop'}: start the program "
            "with trio.run(main), or call cuca from asyncio through trio-asyncio "
            "(trio_asyncio.open_loop() and trio_as_aio)"
        )


class CucaClient:
    """A client for one provider. Use it as an async context manager::

        async with CucaClient(provider=ProviderEndpoint.OPENAI, api_key=key) as client:
            async with client.generate_stream(request) as stream:
                async for item in stream:
                    ...
            print(stream.response.usage)

    The client owns one ``httpx.AsyncClient`` whose connection pool is reused across
    turns, and closes it on exit. ``plugins`` run in order on every turn; ``stages``
    inserts user stages into every turn's pipeline (see :mod:`cuca.stages`).
    ``timeout`` is a :class:`Timeouts`, a number of seconds for every operation, or
    ``None`` (no timeout, the default). ``local_model`` is required for
    ``ProviderEndpoint.LOCAL``. ``retry`` is the :class:`RetryPolicy` for failures
    before the first item of an answer (2 retries by default; docs/timeouts.md).

    ``base_url`` may be a list: a pool of servers serving the same model, each turn
    sent to the one with the fewest turns in flight, a failing one ejected for a
    cool-down (``pool``, a :class:`PoolPolicy`); see docs/fallback.md.

    A gate (a :class:`~cuca.RateLimiter`, a :class:`~cuca.Budget`, any
    :class:`~cuca.admission.TurnGate`) goes in ``plugins`` and admits every turn before
    its request goes out, in order, and gets its permit back when the turn ends; a
    :class:`~cuca.ResponseCache` there answers turns it has kept (docs/limits.md,
    docs/cache.md). ``rate_limiter=limiter`` is the same as putting ``limiter`` first
    in ``plugins`` (the spelling of earlier releases, kept).

    ``fused`` chooses how a turn's stages run (docs/pipeline.md): fused into the
    consumer's pull (``True``, the default, the fastest), or each point as its own
    actor on bounded memory channels (``False``); ``generate_stream(..., fused=)``
    overrides it for one turn. Both give the same items.
    """

    def __init__(
        self,
        provider: ProviderEndpoint,
        *,
        base_url: str | Sequence[str] | None = None,
        api_key: str | None = None,
        plugins: Sequence[CucaPlugin] = (),
        timeout: Timeouts | float | None = None,
        provider_config: Any = None,
        local_model: LocalModel | None = None,
        stages: Sequence[Insertion[Any]] = (),
        http_client: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        pool: PoolPolicy | None = None,
        rate_limiter: TurnGate | None = None,
        fused: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        from .retry import RetryPolicy

        _check_client(provider, base_url)
        self.provider = provider
        if base_url is None or base_url == "" or api_key is None:
            base_url, api_key = _from_environment(provider, base_url, api_key)
        urls = None if base_url is None or isinstance(base_url, str) else tuple(base_url)
        self.base_url = urls[0] if urls else base_url if isinstance(base_url, str) else None
        self._api_key = api_key or None  # "": no key, whatever the environment says
        self.plugins = tuple(plugins)
        self.timeouts = _timeouts(timeout)
        self.provider_config = provider_config
        self.local_model = local_model
        self.stages = tuple(stages)
        self.headers = _checked_headers(headers, provider)
        self.retry = retry if retry is not None else RetryPolicy()
        self.fused = fused
        self.rate_limiter = rate_limiter
        self._gates, self._replay = _admitters(rate_limiter, self.plugins)
        endpoint = " ".join(urls) if urls is not None else self.base_url
        self._backend = self._new_backend(http_client, endpoint)
        self._turns = self._over(self._backend)
        self._pool = None if urls is None else self._new_pool(urls, pool, endpoint)

    def _new_backend(
        self, http: httpx.AsyncClient | None, endpoint: str | None
    ) -> HttpBackend | LocalBackend:
        """The backend the client's turns run on: the local engine, or the provider's
        adapter over one connection pool."""
        from .backends import HttpBackend, LocalBackend

        if self.provider == ProviderEndpoint.LOCAL:
            return LocalBackend(self.local_model, self.provider_config)
        from cuca.providers.base import ClientSettings

        settings = ClientSettings(self.provider, self.base_url, self._api_key, self.provider_config)
        return HttpBackend(
            settings,
            headers=self.headers,
            retry=self.retry,
            timeout=self.timeouts.httpx(),
            http=http,
            endpoint=endpoint,
        )

    def _over(self, backend: HttpBackend | LocalBackend) -> BackendTurns:
        from .seams import BackendTurns

        return BackendTurns(
            backend,
            plugins=self.plugins,
            gates=self._gates,
            replay=self._replay,
            stages=self.stages,
            fused=self.fused,
            total=self.timeouts.total,
        )

    def _new_pool(
        self, urls: tuple[str, ...], policy: PoolPolicy | None, endpoint: str | None
    ) -> Pool:
        """The pool of ``base_url=[...]``: the turns of one backend per server, sharing
        the connections, without retries of their own (a failed attempt moves to
        another server; ``policy.attempts`` bounds them); a cached answer serves the
        whole pool (``endpoint``: every URL)."""
        from cuca.providers.base import ClientSettings
        from cuca.routing.pool import Pool, PoolPolicy

        from .backends import HttpBackend
        from .retry import RetryPolicy

        if not urls or self.provider == ProviderEndpoint.LOCAL:
            raise ConfigurationError("a pool needs one base URL or more, on an HTTP provider")
        assert isinstance(self._backend, HttpBackend)
        http = self._backend.http()  # created now: every member shares its connections

        def member(url: str) -> BackendTurns:
            settings = ClientSettings(self.provider, url, self._api_key, self.provider_config)
            backend = HttpBackend(
                settings,
                headers=self.headers,
                retry=RetryPolicy.never(),
                timeout=self.timeouts.httpx(),
                http=http,
                endpoint=endpoint,
            )
            return self._over(backend)

        return Pool(urls, policy or PoolPolicy(), member)

    def __repr__(self) -> str:
        key = "<set>" if self._api_key else None
        return (
            f"CucaClient(provider={self.provider!r}, base_url={self.base_url!r}, "
            f"api_key={key}, plugins={[p.name for p in self.plugins]!r})"
        )

    async def __aenter__(self) -> CucaClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (if the client created it)."""
        if self._pool is not None:
            for member in self._pool.clients:
                await member.aclose()
        await self._backend.aclose()

    def adapter(self) -> ProviderAdapter:
        """The provider adapter this client dispatches to (resolved once)."""
        from .backends import HttpBackend

        if not isinstance(self._backend, HttpBackend):
            raise ConfigurationError("the local engine has no provider adapter")
        return self._backend.adapter()

    def pipeline(
        self,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Pipeline:
        """The pipeline of one turn: a stage for each point of the HTTP or the local
        table (:mod:`cuca.stages.points`), plus the user's insertions. ``headers`` are
        the turn's own extra headers, over the client's."""
        from .backends import TurnOptions

        turn_headers = _checked_headers(headers, self.provider)
        return self._turns.pipeline(stages, TurnOptions(retry, turn_headers))

    # -- running a turn ---------------------------------------------------------------

    @turn_block("client.generate_stream(request)")
    @asynccontextmanager
    async def generate_stream(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[ResponseStream]:
        """Stream one turn. Leaving the block early (break, exception, cancellation)
        cancels the turn: the HTTP response is closed and every task of the turn has
        ended before this returns. ``fused`` overrides the client's for this turn;
        ``headers`` are sent with this turn's request, over the client's own (see
        docs/unified.md, Extra headers).

        It is an ``async with`` block: ``async for`` straight on it is a
        ``ConfigurationError`` saying so."""
        _require_trio()
        if not isinstance(request, UnifiedRequest):
            raise ConfigurationError(f"a turn takes a UnifiedRequest, not {kind(request)}")
        turn_headers = _checked_headers(headers, self.provider)
        if self._pool is not None:
            if retry is not None:
                raise ConfigurationError("a pool retries on its other servers: see PoolPolicy")
            if fused is not None:
                raise ConfigurationError("a pool's turns run as its client's: set fused there")
            pooled = self._pool.generate_stream(request, stages=stages, headers=turn_headers)
            async with pooled as stream:
                yield stream
            return
        request = attrs.evolve(request, provider=self.provider)
        opened = self._turns.generate_stream(
            request, stages=stages, retry=retry, fused=fused, headers=turn_headers
        )
        async with opened as stream:
            yield stream

    @turn_block("client.generate_stream_with_response(request)")
    @asynccontextmanager
    async def generate_stream_with_response(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[tuple[ResponseStream, PendingResponse]]:
        """Like :meth:`generate_stream`, also giving a handle on the response, which is
        filled once the stream has ended."""
        turn = self.generate_stream(
            request, stages=stages, retry=retry, fused=fused, headers=headers
        )
        async with turn as stream:
            yield stream, PendingResponse(stream)

    async def generate(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
        repair: int = 0,
    ) -> Completion:
        """Run one turn to its end and collect it: deltas merged into whole blocks, and
        the answer parsed when the request has an output schema.

        ``repair=N``: an answer that does not fit the output schema is sent back with
        its error quoted, up to N times (:mod:`cuca.repair`); ``attempts`` lists the
        tries and ``response`` sums their usage; after the last failure an
        :class:`~cuca.OutputValidationError` carrying every attempt is raised."""

        async def turn(request: UnifiedRequest) -> Completion:
            opened = self.generate_stream(
                request, stages=stages, retry=retry, fused=fused, headers=headers
            )
            async with opened as stream:
                return await collect(stream, request.output_schema)

        if not repair:
            return await turn(request)
        from .repair import repaired

        return await repaired(turn, request, repair)

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount:
        """How many prompt tokens ``request`` will take on this client's backend, counted
        before it is sent (plugins do not run: what is counted is ``request`` as given).

        Exact on the local engine (the turn's own rendering and tokenizer), llama.cpp
        (``/apply-template`` then ``/tokenize``), Anthropic (``count_tokens``) and Gemini
        (``countTokens``); an estimate with tiktoken for the OpenAI family
        (``exact=False``). See docs/context.md.
        """
        return await self._backend.count_tokens(attrs.evolve(request, provider=self.provider))

    async def model_info(self, model: str = "") -> ModelInfo:
        """How large ``model``'s window is on this client's backend: the loaded ``n_ctx``
        (local engine), llama-server's ``/props``, else genai-prices' model data; figures
        nothing gives are ``None``."""
        return await self._backend.model_info(model)

    def run_tools(
        self,
        request: UnifiedRequest,
        tools: Sequence[Tool | Callable[..., Any]],
        **options: Unpack[ToolLoopOptions],
    ) -> AbstractAsyncContextManager[ToolLoopStream]:
        """Run ``request`` with ``tools`` until the model answers without a call (see
        :func:`cuca.tools.loop.run_tools` and docs/tools.md)::

            async with client.run_tools(request, tools=[get_weather], max_steps=4) as stream:
                async for item in stream:
                    ...
            stream.conversation, stream.usage
        """
        from cuca.tools.loop import run_tools

        written = "client.run_tools(request, tools)"
        return TurnBlock(run_tools(self, request, tools, **options), written)

    # -- batches (cuca.batches; docs/batches.md) ---------------------------------------

    async def batch(
        self,
        requests: Mapping[str, UnifiedRequest] | Sequence[UnifiedRequest],
        *,
        store: Store | None = None,
        label: str = "cuca batch",
        polling: BatchPolling | None = None,
    ) -> BatchJob:
        """Submit ``requests`` as one batch job, answered within a day at the vendor's
        batch rate (OpenAI's Batch API, Anthropic's Message Batches, Gemini's batch
        mode), or run as concurrent turns on the local engine. ``requests`` maps your
        ids to requests (a sequence is numbered ``"0"``, ``"1"``...); the job is recorded
        in ``store`` (this process's memory by default: pass a shared store for
        ``batch_job`` to find it after a restart). A :class:`~cuca.Budget` among the
        plugins reserves the job's projection now and is charged when its results are
        read. See docs/batches.md."""
        from cuca.batches.job import submit

        _require_trio()
        return await submit(self._batches(), requests, store=store, label=label, polling=polling)

    async def batch_job(
        self, job_id: str, *, store: Store | None = None, polling: BatchPolling | None = None
    ) -> BatchJob:
        """The batch job ``job_id`` (a :attr:`BatchJob.id`), from its record in
        ``store``: in this process or another sharing the store, after a restart."""
        from cuca.batches.job import reattach

        _require_trio()
        return await reattach(self._batches(), job_id, store=store, polling=polling)

    def _batches(self) -> BatchBackend:
        """Where this client's batches run: the wire's batch format, or the engine."""
        if self._pool is not None:
            raise ConfigurationError("a batch goes to one server: not to a pool of base URLs")
        from cuca.batches.local import LocalBatches
        from cuca.batches.wire import WireBatches

        from .backends import HttpBackend, request_call

        backend = self._backend
        if not isinstance(backend, HttpBackend):
            return LocalBatches(self.generate, backend.local().n_seq)
        adapter = backend.adapter()
        http, error = backend.http(), adapter.status_error
        send = partial(request_call, http, status_error=error, headers=self.headers)
        return WireBatches(self.provider, adapter.batch_wire(), send, self.plugins)

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        model: str = "",
        dimensions: int | None = None,
        pooling: Pooling | None = None,
        batch_size: int | None = None,
        concurrency: int = 4,
    ) -> Embeddings:
        """The embedding of each of ``inputs`` (one text or many), in input order, with
        exact usage and cost where the vendor reports them (see docs/embeddings.md and
        :func:`cuca.embeddings.embed`). ``dimensions`` shortens the vectors where the
        model can; ``pooling`` is for the local engine's models that declare none;
        ``batch_size`` caps the texts per request (the backend's limit is the most);
        ``concurrency`` the requests in flight. Anthropic and DeepSeek have no
        embedding route: a ``ConfigurationError`` before any request."""
        from cuca.cache import ResponseCache
        from cuca.embeddings import EmbeddingTarget, embed

        from .backends import HttpBackend

        _require_trio()
        if self._pool is not None:
            raise ConfigurationError("embed runs on one server: give the client one base_url")
        backend = self._backend
        route = backend.embedding_route()
        send = backend.request_json if isinstance(backend, HttpBackend) else _local_send
        cache = self._replay if isinstance(self._replay, ResponseCache) else None
        target = EmbeddingTarget(
            self.provider, route, send, self._gates, cache, backend.endpoint, self.retry
        )
        return await embed(
            target,
            inputs,
            model=model,
            dimensions=dimensions,
            pooling=pooling,
            batch_size=batch_size,
            concurrency=concurrency,
        )


async def _local_send(wire: object, heads: object = None) -> object:
    """The local engine's embedding route sends nothing."""
    raise ConfigurationError("the local engine sends no HTTP request")


def _admitters(
    limiter: TurnGate | None, plugins: Sequence[CucaPlugin]
) -> tuple[tuple[TurnGate, ...], TurnReplay | None]:
    """The gates of a turn (the limiter, then the plugins that are gates, in order) and
    the first plugin that replays turns (the response cache)."""
    if limiter is None and not plugins:
        return (), None
    from .admission import TurnGate, TurnReplay

    gates = [] if limiter is None else [limiter]
    gates += [plugin for plugin in plugins if isinstance(plugin, TurnGate)]
    replay = next((p for p in plugins if isinstance(p, TurnReplay)), None)
    if limiter is not None and not isinstance(limiter, TurnGate):
        raise ConfigurationError(
            f"rate_limiter must be a cuca.RateLimiter (a TurnGate), not {kind(limiter)}"
        )
    return tuple(gates), replay
