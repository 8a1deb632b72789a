"""Embedding vectors kept in the client's :class:`~cuca.ResponseCache`, one entry per
text: a call whose texts were partly seen before sends only the others."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cuca.vectors import Vector, vector_from_base64

if TYPE_CHECKING:
    from cuca.cache import ResponseCache

__all__ = ["EmbeddingCache"]


class EmbeddingCache:
    """The vectors of one ``embed`` call's texts in ``cache``'s store, under
    ``<prefix>:embedding:<SHA-256>`` of the provider, endpoint, model, dimensions,
    pooling and text. Embeddings do not sample: every call is kept (``cache_sampled``
    does not apply); ``ttl``, ``max_entries`` and ``fail_open`` do."""

    def __init__(
        self, cache: ResponseCache, provider: str, endpoint: str | None, model: str
    ) -> None:
        self.cache = cache
        self.scope = {"provider": provider, "endpoint": endpoint, "model": model}

    def key(self, text: str, dimensions: int | None, pooling: str | None) -> str:
        canonical = json.dumps(
            {**self.scope, "dimensions": dimensions, "pooling": pooling, "text": text},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        return f"{self.cache.prefix}:embedding:{digest}"

    async def lookup(
        self, texts: Sequence[str], dimensions: int | None, pooling: str | None
    ) -> list[Vector | None]:
        """The kept vector of each text, ``None`` where there is none."""
        found: list[Vector | None] = []
        for text in texts:
            entry: Any = await self.cache.get_entry(self.key(text, dimensions, pooling))
            vector = entry.get("vector") if isinstance(entry, dict) else None
            found.append(vector_from_base64(vector) if isinstance(vector, str) else None)
        return found

    async def keep(
        self,
        texts: Sequence[str],
        vectors: Sequence[Vector],
        dimensions: int | None,
        pooling: str | None,
    ) -> None:
        """Keep each text's vector (float32, little-endian, base64: what the store's
        JSON holds compactly)."""
        for text, vector in zip(texts, vectors, strict=True):
            await self.cache.set_entry(
                self.key(text, dimensions, pooling), {"vector": _base64(vector)}
            )


def _base64(vector: Vector) -> str:
    if sys.byteorder != "little":
        vector = array("f", vector)
        vector.byteswap()
    return base64.b64encode(vector.tobytes()).decode("ascii")
