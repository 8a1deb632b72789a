"""cuca.providers: the provider adapters, and what an adapter of your own needs.

An out-of-tree adapter implements :class:`ProviderAdapter` (an ``encode`` into an
:class:`HttpRequest`, a :class:`StreamDecoder` per response) and is served for a custom
endpoint by :func:`register_adapter`; ``docs/providers/custom.md`` walks through one.
The names below are imported on first use, so that naming an endpoint (the provider
table) loads no adapter.
"""

import typing as _typing

from cuca._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from .base import ClientSettings as ClientSettings
    from .base import Framer as Framer
    from .base import HttpRequest as HttpRequest
    from .base import Item as Item
    from .base import ProviderAdapter as ProviderAdapter
    from .base import StreamDecoder as StreamDecoder
    from .base import guarded_feed as guarded_feed
    from .decoding import loads_json as loads_json
    from .registry import register_adapter as register_adapter

_LAZY: dict[str, str] = {
    "ClientSettings": "cuca.providers.base",
    "Framer": "cuca.providers.base",
    "HttpRequest": "cuca.providers.base",
    "Item": "cuca.providers.base",
    "ProviderAdapter": "cuca.providers.base",
    "StreamDecoder": "cuca.providers.base",
    "guarded_feed": "cuca.providers.base",
    "loads_json": "cuca.providers.decoding",
    "register_adapter": "cuca.providers.registry",
}
"""Names resolved on first use: name -> the module that defines it."""


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())
