"""llama-server's native ``POST /embedding`` route (docs/embeddings.md, The wires).

The request's ``content`` is the list of texts; the answer is a list of
``{"index": i, "embedding": [[...]]}``, one row per text when the server pools (started
with ``--embeddings`` and a pooling, the model's or ``--pooling``), a row per token when
it does not (``--pooling none``: refused here, a text has no one vector then). An older
server answered one text with ``{"embedding": [...]}``; that is read too. The route
reports no token counts. The OpenAI-shaped ``/v1/embeddings`` of the same server is the
chat wire's route (:mod:`cuca.providers.chat.embeddings`).
"""

from __future__ import annotations

from typing import Any

from cuca.errors import ProviderError
from cuca.vectors import (
    EmbeddingCall,
    EmbeddingError,
    EmbeddingPart,
    Send,
    Vector,
    vector_from_floats,
)

from ..base import HttpRequest

__all__ = ["MAX_INPUTS", "LlamaEmbeddings", "decode_embeddings"]

MAX_INPUTS = 256
"""Texts per request: the server queues each as a task of its own, so this only bounds
one request's body."""

PROVIDER = "llama_cpp"


def decode_embeddings(answer: Any) -> EmbeddingPart:
    """The vectors of a 2xx answer, placed by ``index``."""
    if isinstance(answer, dict) and "embedding" in answer:
        answer = [{"index": 0, "embedding": answer["embedding"]}]
    if not isinstance(answer, list):
        raise ProviderError(PROVIDER, f"not an /embedding answer: {str(answer)[:200]}")
    vectors: list[Vector | None] = [None] * len(answer)
    for position, item in enumerate(answer):
        index = item.get("index", position) if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < len(vectors) or vectors[index] is not None:
            raise EmbeddingError(PROVIDER, f"item {position} has no usable index: {index!r}")
        vectors[index] = _vector(item.get("embedding"), position)
    return EmbeddingPart(tuple(v for v in vectors if v is not None), None)


def _vector(raw: Any, position: int) -> Vector:
    if isinstance(raw, list) and raw and isinstance(raw[0], list):
        if len(raw) != 1:
            raise EmbeddingError(
                PROVIDER,
                f"item {position} has a vector per token ({len(raw)}): the server does not "
                "pool; start llama-server with --pooling mean (or last, cls)",
            )
        raw = raw[0]
    if not isinstance(raw, list):
        raise EmbeddingError(PROVIDER, f"item {position} has no embedding: {raw!r:.200}")
    try:
        return vector_from_floats(raw)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(PROVIDER, f"item {position}: {exc}") from exc


class LlamaEmbeddings:
    """``POST {root}/embedding`` (an :class:`~cuca.vectors.EmbeddingRoute`)."""

    name = "llama-server's POST /embedding"
    provider = PROVIDER
    max_inputs = MAX_INPUTS
    refuses_empty = False

    def __init__(self, root: str, headers: dict[str, str]) -> None:
        self.url = f"{root.rstrip('/')}/embedding"
        self._headers = headers

    async def embed(self, call: EmbeddingCall, send: Send) -> EmbeddingPart:
        body = {"content": list(call.texts)}
        return decode_embeddings(await send(HttpRequest(self.url, self._headers, body)))
