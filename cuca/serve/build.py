"""From a :class:`~.config.ServeSpec` to running backends: local models loaded (off the
trio thread), one client per served model, closed when the server stops."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from cuca.client import CucaClient
from cuca.errors import ConfigurationError
from cuca.plugins import CucaPlugin
from cuca.retry import RetryPolicy

from .app import Backend
from .config import BackendSpec, ServeSpec

if TYPE_CHECKING:
    from cuca.engine import LocalModel

__all__ = ["DEFAULT_CTX", "DEFAULT_PARALLEL", "open_backends"]

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
        n_threads=spec.threads,
        chat_template=template,
        n_seq=spec.parallel or DEFAULT_PARALLEL,
    )


def plugins_of(spec: BackendSpec) -> list[CucaPlugin]:
    """The route's client features (:data:`.config.FEATURES`, and its session log)."""
    from cuca.cache import ResponseCache
    from cuca.limits import Budget, RateLimiter

    classes: dict[str, Any] = {"rate_limit": RateLimiter, "budget": Budget, "cache": ResponseCache}
    plugins: list[CucaPlugin] = []
    for name, settings in spec.features.items():
        try:
            plugins.append(classes[name](**settings))
        except TypeError as exc:
            raise ConfigurationError(f"models.{spec.name}.{name}: {exc}") from None
    if spec.session_log is not None:
        from cuca.observers.session_log import SessionLog

        plugins.append(SessionLog(spec.session_log))
    return plugins


def _client(spec: BackendSpec, model: LocalModel | None) -> CucaClient:
    retry = None if spec.retries is None else RetryPolicy(max_retries=spec.retries)
    config: Any = None
    if spec.provider.kind == "llama_cpp":
        from cuca.providers.llamacpp.encode import LlamaCppConfig

        config = LlamaCppConfig(n_threads=spec.threads)
    return CucaClient(
        spec.provider,
        base_url=spec.base_url,
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
        for backend in spec.backends:
            model = None
            if backend.is_local:
                key = (backend.path, backend.ctx, backend.chat_template_file, backend.parallel)
                if key not in loaded:
                    loaded[key] = await trio.to_thread.run_sync(_load, backend)
                    stack.callback(loaded[key].close)
                model = loaded[key]
            client = await stack.enter_async_context(_client(backend, model))
            for plugin in client.plugins:  # a session log writes what it queued
                close = getattr(plugin, "close", None)
                if callable(close):
                    stack.push_async_callback(trio.to_thread.run_sync, close)
            backends[backend.name] = Backend(client, backend.model, counts_exactly=backend.is_local)
        yield backends
