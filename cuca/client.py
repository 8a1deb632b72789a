"""The client: a façade that chooses a backend and runs each turn through the seams."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import httpx

from ._block import turn_block
from ._checks import kind
from .bulk import BulkCalls
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
    from cuca.engine.model import LocalModel
    from cuca.providers.base import ProviderAdapter
    from cuca.routing.pool import Pool, PoolPolicy
    from cuca.stages.pipeline import Pipeline
    from cuca.turn import Insertion

    from .admission import TurnGate
    from .backends import HttpBackend, LocalBackend
    from .retry import RetryPolicy
    from .seams import BackendTurns

__all__ = ["CucaClient", "PendingResponse", "Timeouts"]


class CucaClient(BulkCalls):
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
        self.timeouts = timeouts(timeout, http_client)
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
