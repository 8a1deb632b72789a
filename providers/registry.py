"""Which adapter serves which endpoint.

Built-in adapters are imported lazily, so that a client for one backend loads only
that backend's module. ``register_adapter`` lets a user plug an adapter in for a custom
endpoint name; an endpoint with no adapter fails to dispatch with a clear message.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from cuca.errors import ConfigurationError

from .base import ClientSettings, ProviderAdapter

__all__ = ["AdapterFactory", "adapter_for", "register_adapter"]

AdapterFactory = Callable[[ClientSettings], ProviderAdapter]

# endpoint kind -> "module:factory", resolved on first use
_BUILTIN: dict[str, str] = {
    "openai": "cuca.providers.openai_compat:make_openai",
    "vllm": "cuca.providers.openai_compat:make_vllm",
    "lm_studio": "cuca.providers.openai_compat:make_lm_studio",
    "deepseek": "cuca.providers.deepseek:make_deepseek",
    "llama_cpp": "cuca.providers.llamacpp:make_llama_cpp",
    "anthropic": "cuca.providers.anthropic:make_anthropic",
    "google_gemini": "cuca.providers.gemini:make_gemini",
}
_CUSTOM: dict[str, AdapterFactory] = {}


def register_adapter(custom_name: str, factory: AdapterFactory) -> None:
    """Serve ``ProviderEndpoint.custom(custom_name)`` with ``factory``'s adapters."""
    _CUSTOM[custom_name] = factory


def adapter_for(settings: ClientSettings) -> ProviderAdapter:
    """The adapter for ``settings.provider``, configured from ``settings``."""
    endpoint = settings.provider
    if endpoint.is_custom:
        factory = _CUSTOM.get(endpoint.custom_name)
        if factory is None:
            raise ConfigurationError("custom endpoints require a registered adapter")
        return factory(settings)
    target = _BUILTIN.get(endpoint.kind)
    if target is None:
        raise ConfigurationError(f"{endpoint} has no HTTP adapter")
    module_name, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    adapter: ProviderAdapter = factory(settings)
    return adapter
