"""Replay servers for the embedding wires: each checks a request as the vendor documents
it and answers in the shape of its transcript (``tests/transcripts/README.md``,
Embedding answers), with a vector per text that depends on the text only.

Use one as ``open_replay_server(openai_embeddings)``; the requests they received are
the server's ``requests``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from typing import Any

from cuca.testing import RecordedRequest, Reply

__all__ = [
    "gemini_embeddings",
    "llama_embedding",
    "openai_embeddings",
    "replay_tokens",
    "replay_vector",
]

JSON = [("content-type", "application/json")]
OPENAI_DIMENSIONS = 1536  # text-embedding-3-small
GEMINI_DIMENSIONS = 3072  # gemini-embedding-001


def replay_vector(text: str, size: int) -> list[float]:
    """The vector the replay servers give ``text``: float32 values from its SHA-256."""
    seed = hashlib.sha256(text.encode()).digest()
    values = [((seed[i % 32] + i) % 251 - 125) / 1000 for i in range(size)]
    packed = struct.pack(f"<{size}f", *values)
    return list(struct.unpack(f"<{size}f", packed))


def replay_tokens(text: str) -> int:
    """The prompt tokens the OpenAI replay reports for ``text``."""
    return len(text.encode()) // 4 + 1


def _json(body: Any, status: int = 200) -> Reply:
    return Reply(json.dumps(body).encode(), status=status, headers=JSON)


def _openai_error(message: str, param: str | None = "input") -> Reply:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return _json({"error": error}, 400)


def openai_embeddings(request: RecordedRequest) -> Reply:
    """OpenAI's ``POST /v1/embeddings``: ``input`` a string or up to 2048 non-empty
    strings, ``encoding_format`` ``float`` (default) or ``base64``, ``dimensions``."""
    if request.method != "POST" or not request.path.endswith("/v1/embeddings"):
        return _json({"error": {"message": f"no route {request.path}"}}, 404)
    if not request.headers.get("authorization", "").startswith("Bearer "):
        return _json({"error": {"message": "You didn't provide an API key."}}, 401)
    body = request.json()
    texts = body.get("input")
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list) or not texts or len(texts) > 2048:
        return _openai_error("'input' must be a string or an array of 1 to 2048 strings")
    if any(text == "" for text in texts):
        return _openai_error("'$.input' is invalid: it cannot be an empty string")
    fmt = body.get("encoding_format", "float")
    size = body.get("dimensions") or OPENAI_DIMENSIONS
    data = []
    for index, text in enumerate(texts):
        vector = replay_vector(text, size)
        embedding: Any = vector
        if fmt == "base64":
            embedding = base64.b64encode(struct.pack(f"<{size}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(replay_tokens(text) for text in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return _json({"object": "list", "data": data, "model": body["model"], "usage": usage})


def _gemini_error(message: str, status: int = 400) -> Reply:
    error = {"code": status, "message": message, "status": "INVALID_ARGUMENT"}
    return _json({"error": error}, status)


def _gemini_vector(request: Any, model: str) -> dict[str, Any] | Reply:
    if request.get("model") != f"models/{model}":
        return _gemini_error(f"model {request.get('model')!r} does not match models/{model}")
    parts = request.get("content", {}).get("parts", [])
    text = "".join(part.get("text", "") for part in parts)
    if not text:
        return _gemini_error("* EmbedContentRequest.content: contents must not be empty\n")
    size = request.get("outputDimensionality") or GEMINI_DIMENSIONS
    return {"values": replay_vector(text, size)}


def gemini_embeddings(request: RecordedRequest) -> Reply:
    """Gemini's ``models/{model}:embedContent`` and ``:batchEmbedContents`` (at most 100
    requests, each naming the same model), keyed by ``x-goog-api-key``."""
    path = request.path
    if not request.headers.get("x-goog-api-key"):
        return _gemini_error("Method doesn't allow unregistered callers", 403)
    model, _, method = path.removeprefix("/v1beta/models/").partition(":")
    body = request.json()
    if method == "embedContent":
        found = _gemini_vector({"model": f"models/{model}", **body}, model)
        return found if isinstance(found, Reply) else _json({"embedding": found})
    if method != "batchEmbedContents":
        return _json({"error": {"code": 404, "message": f"no route {path}"}}, 404)
    requests = body.get("requests", [])
    if len(requests) > 100:
        return _gemini_error(
            "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n"
        )
    embeddings = []
    for item in requests:
        found = _gemini_vector(item, model)
        if isinstance(found, Reply):
            return found
        embeddings.append(found)
    return _json({"embeddings": embeddings})


def llama_embedding(request: RecordedRequest) -> Reply:
    """llama-server's native ``POST /embedding``: ``content`` a string or a list of
    them, the answer a list of ``{index, embedding: [row]}``."""
    if not request.path.endswith("/embedding"):
        return _json({"error": {"code": 404, "message": "File Not Found"}}, 404)
    content = request.json().get("content")
    texts = [content] if isinstance(content, str) else content
    rows = [{"index": i, "embedding": [replay_vector(t, 576)]} for i, t in enumerate(texts)]
    return _json(rows)
