"""From a :class:`~.config.ServeSpec` to running backends: local models loaded (off the
trio thread), one client per served model (a pool when its ``base_url`` is a list,
with the route's features as plugins), a :class:`~cuca.FallbackClient` over it and the
routes its ``fallback`` names, all closed when the server stops."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from cuca.client import CucaClient
from cuca.errors import ConfigurationError
from cuca.plugins import CucaPlugin
from cuca.retry import RetryPolicy
from cuca.routing.fallback import FallbackClient
from cuca.routing.pool import PoolPolicy
from cuca.stream import TurnClient

from .app import Backend
from .config import BackendSpec, ServeSpec
from .keys import KeyLimits

if TYPE_CHECKING:
    from cuca.engine import LocalModel

__all__ = ["DEFAULT_CTX", "DEFAULT_PARALLEL", "key_limits", "open_backends"]

DEFAULT_CTX = 4096
DEFAULT_PARALLEL = 4
"""Conversations the local engine decodes together (each on its own ``ctx`` cells)."""


def _load(spec: BackendSpec) -> LocalModel:
    from cuca.engine import LocalModel

    assert spec.path is not None
    template = None
    if spec.chat_template_file is not None:
        try:
            template = spec.chat_template_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read {spec.chat_template_file}: {exc}") from None
    return LocalModel.load(
        spec.path,
        n_ctx=spec.ctx or DEFAULT_CTX,
        # --threads bounds every step: with several conversations each step decodes
        # several rows, which llama.cpp runs on n_threads_batch (as llama-server's -tb
        # follows -t)
        n_threads=spec.threads,
        n_threads_batch=spec.threads,
        chat_template=template,
        n_seq=spec.parallel or DEFAULT_PARALLEL,
        exact_reuse=not spec.fast,
        flash_attention=spec.fast,
    )


def plugins_of(spec: BackendSpec) -> list[CucaPlugin]:
    """The route's client features (:data:`.config.FEATURES`, and its session log)."""
    from cuca.cache import ResponseCache
    from cuca.context import Compactor
    from cuca.limits import Budget, RateLimiter

    classes: dict[str, Any] = {
        "rate_limit": RateLimiter,
        "budget": Budget,
        "cache": ResponseCache,
        "compaction": Compactor,
    }
    plugins: list[CucaPlugin] = []
    for name, settings in spec.features.items():
        try:
            plugins.append(classes[name](**settings))
        except (TypeError, ValueError, ConfigurationError) as exc:
            said = exc.args[0] if exc.args else exc
            raise ConfigurationError(f"models.{spec.name}.{name}: {said}") from None
    if spec.session_log is not None:
        from cuca.observers.session_log import SessionLog

        plugins.append(SessionLog(spec.session_log))
    return plugins


def _pool(spec: BackendSpec) -> PoolPolicy | None:
    if spec.pool is None:
        return None
    if not isinstance(spec.base_url, tuple):
        raise ConfigurationError(f"models.{spec.name}.pool needs base_url to be a list of URLs")
    try:
        return PoolPolicy(**spec.pool)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"models.{spec.name}.pool: {exc}") from None


def _client(spec: BackendSpec, model: LocalModel | None) -> CucaClient:
    retry = None if spec.retries is None else RetryPolicy(max_retries=spec.retries)
    config: Any = None
    if spec.provider.kind == "llama_cpp":
        from cuca.providers.llamacpp.encode import LlamaCppConfig

        config = LlamaCppConfig(n_threads=spec.threads)
    return CucaClient(
        spec.provider,
        base_url=spec.base_url,
        pool=_pool(spec),
        api_key=spec.api_key,
        provider_config=config,
        local_model=model,
        timeout=spec.timeout,
        retry=retry,
        plugins=plugins_of(spec),
    )


@asynccontextmanager
async def open_backends(spec: ServeSpec) -> AsyncIterator[dict[str, Backend]]:
    """The backends of ``spec`` by served name, open for the block."""
    backends: dict[str, Backend] = {}
    async with AsyncExitStack() as stack:
        loaded: dict[Any, LocalModel] = {}
        clients: dict[str, CucaClient] = {}
        for backend in spec.backends:
            model = None
            if backend.is_local:
                key = (
                    backend.path,
                    backend.ctx,
                    backend.chat_template_file,
                    backend.parallel,
                    backend.fast,
                )
                if key not in loaded:
                    loaded[key] = await trio.to_thread.run_sync(_load, backend)
                    stack.callback(loaded[key].close)
                model = loaded[key]
            client = await stack.enter_async_context(_client(backend, model))
            for plugin in client.plugins:  # a session log writes what it queued
                close = getattr(plugin, "close", None)
                if callable(close):
                    stack.push_async_callback(trio.to_thread.run_sync, close)
            clients[backend.name] = client
        for backend in spec.backends:
            backends[backend.name] = _served(backend, spec, clients)
        yield backends


def _served(backend: BackendSpec, spec: ServeSpec, clients: dict[str, CucaClient]) -> Backend:
    """The route's backend: its own client, or a fallback over it and the routes its
    ``fallback`` names (each sent its own ``model``, or its name). The fallback is not
    closed: the clients it holds are, once each."""
    own = clients[backend.name]
    exact = backend.is_local
    if not backend.fallback:
        return Backend(own, backend.model, counts_exactly=exact)
    by_name = {b.name: b for b in spec.backends}
    chain: list[TurnClient | tuple[TurnClient, str]] = [own]
    for name in backend.fallback:
        chain.append((clients[name], by_name[name].model or name))
    return Backend(FallbackClient(chain), backend.model, counts_exactly=exact, counter=own)


def key_limits(spec: ServeSpec) -> KeyLimits | None:
    """The ``[keys]`` table as :class:`~.keys.KeyLimits` (``None`` when it sets no
    gate): ``store`` a ``redis://`` URL (a :class:`~cuca.store.RedisStore`, shared by
    replicas) or a SQLite file (replicas on one machine)."""
    table = spec.keys
    if table.get("rate_limit") is None and table.get("budget") is None:
        return None
    from cuca.store import MemoryStore, RedisStore, SqliteStore, Store

    where = table.get("store")
    store: Store = MemoryStore()
    if where is not None:
        store = RedisStore(where) if where.startswith("redis") else SqliteStore(Path(where))
    return KeyLimits(table.get("rate_limit"), table.get("budget"), store)
