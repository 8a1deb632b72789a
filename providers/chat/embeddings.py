"""The ``/embeddings`` route of the OpenAI wire: OpenAI, vLLM, LM Studio and
llama-server's ``/v1/embeddings`` (docs/embeddings.md, The wires).

A request asks for ``encoding_format: "base64"``: each vector comes back as the base64
of its little-endian float32 values, decoded with one copy (a JSON list of numbers, from
a server that ignores the format, is read too). ``data[i].index`` places each vector;
``usage.prompt_tokens`` is the exact count.
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
    vector_from_base64,
    vector_from_floats,
)

from ..base import HttpRequest

__all__ = ["MAX_INPUTS", "ChatEmbeddings", "decode_embeddings", "encode_embeddings"]

MAX_INPUTS = 2048
"""OpenAI's limit on the inputs of one request ("any array must be 2048 dimensions or
less", the API reference's ``input``)."""


def encode_embeddings(call: EmbeddingCall) -> dict[str, Any]:
    """The JSON body of ``POST /embeddings`` for ``call``."""
    body: dict[str, Any] = {
        "model": call.model,
        "input": list(call.texts),
        "encoding_format": "base64",
    }
    if call.dimensions is not None:
        body["dimensions"] = call.dimensions
    return body


def decode_embeddings(answer: Any, provider: str) -> EmbeddingPart:
    """The vectors of a 2xx answer, placed by ``index``, and its ``usage``."""
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
        raise ProviderError(provider, f"not an embeddings answer: {str(answer)[:200]}")
    vectors: list[Vector | None] = [None] * len(answer["data"])
    for position, item in enumerate(answer["data"]):
        index = item.get("index", position) if isinstance(item, dict) else None
        raw = item.get("embedding") if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < len(vectors) or vectors[index] is not None:
            raise EmbeddingError(provider, f"data[{position}] has no usable index: {index!r}")
        vectors[index] = _vector(raw, provider, position)
    usage = answer.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    model = answer.get("model")
    return EmbeddingPart(
        tuple(v for v in vectors if v is not None),
        tokens if type(tokens) is int else None,
        model if isinstance(model, str) else None,
    )


def _vector(raw: Any, provider: str, position: int) -> Vector:
    try:
        if isinstance(raw, str):
            return vector_from_base64(raw)
        if isinstance(raw, list):
            return vector_from_floats(raw)
    except (ValueError, TypeError) as exc:
        raise EmbeddingError(provider, f"data[{position}].embedding: {exc}") from exc
    raise EmbeddingError(provider, f"data[{position}].embedding is {type(raw).__name__}")


class ChatEmbeddings:
    """``POST {base_url}/embeddings`` (an :class:`~cuca.vectors.EmbeddingRoute`)."""

    max_inputs = MAX_INPUTS

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        provider: str,
        *,
        refuses_empty: bool,
        model: str = "",
    ) -> None:
        self.url = f"{base_url.rstrip('/')}/embeddings"
        self._headers = headers
        self.provider = provider
        self.name = f"{provider}'s POST /embeddings"
        self.refuses_empty = refuses_empty
        self._model = model

    async def embed(self, call: EmbeddingCall, send: Send) -> EmbeddingPart:
        if self._model:
            call = EmbeddingCall(call.texts, self._model, call.dimensions, call.pooling)
        answer = await send(HttpRequest(self.url, self._headers, encode_embeddings(call)))
        return decode_embeddings(answer, self.provider)
