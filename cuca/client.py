"""The client: one connection pool, one provider, a stage pipeline per turn."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import httpx

from ._block import turn_block
from ._checks import kind
from .calls import TurnCalls
from .errors import ConfigurationError
from .plugins import CucaPlugin
from .settings import (
    Timeouts,
    admitters,
    check_client,
    checked_headers,
    from_environment,
    require_trio,
    timeouts,
)
from .stream import PendingResponse, ResponseStream, TurnClient
from .types import ModelInfo, ProviderEndpoint, TokenCount, UnifiedRequest

if TYPE_CHECKING:
    from cuca.batches import BatchJob, BatchPolling
    from cuca.batches.job import BatchBackend
    from cuca.embeddings import Embeddings
    from cuca.engine.model import LocalModel
    from cuca.providers.base import ProviderAdapter
    from cuca.routing.pool import Pool, PoolPolicy
    from cuca.stages.pipeline import Pipeline
    from cuca.store import Store
    from cuca.turn import Insertion

    from .admission import TurnGate
    from .backends import HttpBackend, LocalBackend
    from .retry import RetryPolicy
    from .seams import BackendTurns
    from .vectors import Pooling

__all__ = ["CucaClient", "PendingResponse", "Timeouts"]


class CucaClient(TurnCalls):
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

        check_client(provider, base_url)
        self.provider = provider
        base_url, api_key = from_environment(provider, base_url, api_key)
        urls = None if base_url is None or isinstance(base_url, str) else tuple(base_url)
        self.base_url = urls[0] if urls else base_url if isinstance(base_url, str) else None
        self._api_key = api_key or None  # "": no key, whatever the environment says
        self.plugins = tuple(plugins)
        self.timeouts = timeouts(timeout)
        self.provider_config = provider_config
        self.local_model = local_model
        self.stages = tuple(stages)
        self.headers = checked_headers(headers, provider)
        self.retry = retry if retry is not None else RetryPolicy()
        self.fused = fused
        self.rate_limiter = rate_limiter
        self._gates, self._replay = admitters(rate_limiter, self.plugins)
        endpoint = " ".join(urls) if urls is not None else self.base_url
        self._backend = self._new_backend(http_client, endpoint)
        self._turns = self._over(self._backend)
        self._pool = None if urls is None else self._new_pool(urls, pool)

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

    def _new_pool(self, urls: tuple[str, ...], policy: PoolPolicy | None) -> Pool:
        """The pool of ``base_url=[...]``: the turns of one backend per server, sharing
        the connections, without retries of their own (``policy.attempts`` bounds the
        servers a turn tries)."""
        from cuca.routing.pool import Pool, PoolPolicy

        from .backends import HttpBackend

        if not urls or not isinstance(self._backend, HttpBackend):
            raise ConfigurationError("a pool needs one base URL or more, on an HTTP provider")
        member = self._backend.member
        return Pool(urls, policy or PoolPolicy(), lambda url: self._over(member(url)))

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

        turn_headers = checked_headers(headers, self.provider)
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
        require_trio()
        if not isinstance(request, UnifiedRequest):
            raise ConfigurationError(f"a turn takes a UnifiedRequest, not {kind(request)}")
        turn_headers = checked_headers(headers, self.provider)
        turns: TurnClient = self._turns if self._pool is None else self._pool
        if self._pool is None:
            request = attrs.evolve(request, provider=self.provider)
        opened = turns.generate_stream(
            request, stages=stages, retry=retry, fused=fused, headers=turn_headers
        )
        async with opened as stream:
            yield stream

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

        require_trio()
        return await submit(self._batches(), requests, store=store, label=label, polling=polling)

    async def batch_job(
        self, job_id: str, *, store: Store | None = None, polling: BatchPolling | None = None
    ) -> BatchJob:
        """The batch job ``job_id`` (a :attr:`BatchJob.id`), from its record in
        ``store``: in this process or another sharing the store, after a restart."""
        from cuca.batches.job import reattach

        require_trio()
        return await reattach(self._batches(), job_id, store=store, polling=polling)

    def _batches(self) -> BatchBackend:
        """Where this client's batches run: the wire's batch format, or the engine."""
        if self._pool is not None:
            raise ConfigurationError("a batch goes to one server: not to a pool of base URLs")
        from cuca.batches.local import LocalBatches
        from cuca.batches.wire import WireBatches

        from .backends import LocalBackend

        backend = self._backend
        if isinstance(backend, LocalBackend):
            return LocalBatches(self.generate, backend.local().n_seq)
        batch_wire = backend.adapter().batch_wire()
        return WireBatches(self.provider, batch_wire, backend.batch_call, self.plugins)

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

        require_trio()
        if self._pool is not None:
            raise ConfigurationError("embed runs on one server: give the client one base_url")
        backend = self._backend
        route, send = backend.embedding_route(), backend.request_json
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
