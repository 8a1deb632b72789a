"""Gemini's embedding routes: ``models/{model}:embedContent`` for one text and
``models/{model}:batchEmbedContents`` for up to 100 (docs/embeddings.md, The wires).

Each text is its own ``Content`` of one text part (several parts of one content would be
embedded as one text). ``outputDimensionality`` shortens the vectors. The answer's
``values`` are JSON numbers; it carries no token counts, so the part's
``prompt_tokens`` is ``None`` (a ``usageMetadata.promptTokenCount``, if a version of the
API sends one, is read).
"""

from __future__ import annotations

from typing import Any

from cuca.errors import ProviderError
from cuca.vectors import EmbeddingCall, EmbeddingError, EmbeddingPart, Send, vector_from_floats

from ..base import HttpRequest

__all__ = ["MAX_INPUTS", "GeminiEmbeddings", "decode_embeddings", "encode_embeddings"]

MAX_INPUTS = 100
"""``batchEmbedContents`` refuses more: "at most 100 requests can be in one batch"."""


def _request(model: str, text: str, dimensions: int | None) -> dict[str, Any]:
    request: dict[str, Any] = {"model": f"models/{model}", "content": {"parts": [{"text": text}]}}
    if dimensions is not None:
        request["outputDimensionality"] = dimensions
    return request


def encode_embeddings(call: EmbeddingCall) -> tuple[str, dict[str, Any]]:
    """The method and JSON body for ``call``: ``embedContent`` for one text,
    ``batchEmbedContents`` for more."""
    model = call.model.removeprefix("models/")
    if len(call.texts) == 1:
        return "embedContent", _request(model, call.texts[0], call.dimensions)
    requests = [_request(model, text, call.dimensions) for text in call.texts]
    return "batchEmbedContents", {"requests": requests}


def decode_embeddings(answer: Any, method: str) -> EmbeddingPart:
    """The vectors of a 2xx answer to ``method``, in request order."""
    if not isinstance(answer, dict):
        raise ProviderError("gemini", f"not an embedding answer: {str(answer)[:200]}")
    found = [answer.get("embedding")] if method == "embedContent" else answer.get("embeddings")
    if not isinstance(found, list):
        raise ProviderError("gemini", f"no embeddings in the answer: {str(answer)[:200]}")
    items: list[Any] = found
    vectors = []
    for position, item in enumerate(items):
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(values, list):
            raise EmbeddingError("gemini", f"embedding {position} has no values: {item!r:.200}")
        try:
            vectors.append(vector_from_floats(values))
        except (TypeError, ValueError) as exc:
            raise EmbeddingError("gemini", f"embedding {position}: {exc}") from exc
    metadata = answer.get("usageMetadata")
    tokens = metadata.get("promptTokenCount") if isinstance(metadata, dict) else None
    return EmbeddingPart(tuple(vectors), tokens if type(tokens) is int else None)


class GeminiEmbeddings:
    """Gemini's embedding routes (an :class:`~cuca.vectors.EmbeddingRoute`)."""

    name = "Gemini's embedContent"
    provider = "gemini"
    max_inputs = MAX_INPUTS
    refuses_empty = True

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = headers

    async def embed(self, call: EmbeddingCall, send: Send) -> EmbeddingPart:
        method, body = encode_embeddings(call)
        model = call.model.removeprefix("models/")
        url = f"{self.base_url}/v1beta/models/{model}:{method}"
        answer = await send(HttpRequest(url, self._headers, body))
        return decode_embeddings(answer, method)
