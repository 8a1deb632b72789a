"""The response cache: a turn seen before is answered from what was kept, as a stream
(see docs/cache.md)."""

from .cache import ResponseCache, cache_key

__all__ = ["ResponseCache", "cache_key"]
