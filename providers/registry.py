"""Which adapter serves which endpoint.

Built-in adapters are found in the provider table (:mod:`cuca.providers.table`) and
imported lazily, so that a client for one backend loads only that backend's module.
``register_adapter`` lets a user plug an adapter in for a custom endpoint name; an
endpoint with no adapter fails to dispatch with a clear message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cuca.errors import ConfigurationError
from cuca.types import ProviderEndpoint

from .base import ClientSettings, ProviderAdapter
from .table import endpoint_info, import_path

__all__ = ["AdapterFactory", "adapter_for", "check_provider_config", "register_adapter"]

AdapterFactory = Callable[[ClientSettings], ProviderAdapter]

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
            raise ConfigurationError(
                "custom endpoints require a registered adapter, and none is registered "
                f"for {endpoint.custom_name!r}"
            )
        return factory(settings)
    info = endpoint_info(endpoint.kind)
    if info is None or info.adapter is None:
        raise ConfigurationError(f"{endpoint} has no HTTP adapter")
    check_provider_config(endpoint, settings.provider_config)
    adapter: ProviderAdapter = import_path(info.adapter)(settings)
    return adapter


def check_provider_config(endpoint: ProviderEndpoint, config: Any) -> None:
    """Refuse a ``provider_config`` the built-in ``endpoint`` does not take, naming
    the type(s) it does take."""
    info = endpoint_info(endpoint.kind)
    if config is None or info is None:
        return
    types = [import_path(target) for target in info.config]
    if any(isinstance(config, kind) for kind in types):
        return
    got = type(config).__name__
    if not types:
        raise ConfigurationError(f"{info.cli_name} takes no provider_config, not {got}")
    wanted = " or ".join(_article(kind.__name__) for kind in types)
    raise ConfigurationError(f"{info.cli_name} takes {wanted}, not {got}")


def _article(name: str) -> str:
    return f"an {name}" if name[0] in "AEIOU" else f"a {name}"
