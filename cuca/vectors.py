"""What an embedding route answers, and the protocol every route keeps.

A backend that embeds text (each wire's ``embeddings.py`` in ``providers/``, the local
engine's embedding mode) is an :class:`EmbeddingRoute`: one request of at most
``max_inputs`` texts in, an :class:`EmbeddingPart` out. The feature above it
(:mod:`cuca.embeddings`) splits, admits, caches and assembles; a route only speaks its
wire. Vectors are ``array.array("f")``: float32 as the servers compute them, read from
the OpenAI wire's base64 with one copy and no per-float Python object (see
docs/embeddings.md for the measurements that chose it over numpy).
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from .errors import ProviderError

__all__ = [
    "POOLINGS",
    "EmbeddingCall",
    "EmbeddingError",
    "EmbeddingPart",
    "EmbeddingRoute",
    "Pooling",
    "Vector",
    "checked_part",
    "vector_from_base64",
    "vector_from_floats",
]

Vector: TypeAlias = "array[float]"
"""One embedding: float32 values (``array("f")``; ``numpy.frombuffer(v, "<f4")`` views
it without a copy)."""

Pooling = Literal["mean", "last", "cls"]
POOLINGS: tuple[Pooling, ...] = ("mean", "last", "cls")
"""How the local engine pools a model's token vectors into one, when the model declares
no pooling of its own (a chat model such as SmolLM2)."""

Send = Callable[[Any], Awaitable[Any]]
"""The client's way of sending one wire request and reading its 2xx JSON answer (a
non-2xx answer raises the adapter's typed error)."""


class EmbeddingError(ProviderError):
    """An embedding answer that cannot be used: fewer or more vectors than texts sent,
    vectors of different lengths in one answer, or not the dimensions asked for."""


@attrs.frozen
class EmbeddingCall:
    """One request to a route: ``texts`` (at most the route's ``max_inputs``), the
    ``model``, the ``dimensions`` asked for (``None``: the model's own) and, for the
    local engine, the ``pooling``."""

    texts: tuple[str, ...]
    model: str
    dimensions: int | None = None
    pooling: Pooling | None = None


@attrs.frozen
class EmbeddingPart:
    """A route's answer to one :class:`EmbeddingCall`: a vector per text in order, the
    prompt tokens the server reported (``None`` when its answer carries no count), and
    the model it names."""

    vectors: tuple[Vector, ...]
    prompt_tokens: int | None
    model: str | None = None


class EmbeddingRoute(Protocol):
    """One backend's embedding route.

    ``name`` names it in messages (``"POST /v1/embeddings"``); ``max_inputs`` is the
    most texts one request may hold (the vendor's documented limit); ``refuses_empty``
    whether the vendor refuses an empty string (the feature then refuses it before any
    request)."""

    name: str
    provider: str
    max_inputs: int
    refuses_empty: bool

    async def embed(self, call: EmbeddingCall, send: Send) -> EmbeddingPart:
        """Embed ``call.texts`` in one request through ``send``."""
        ...


_LITTLE = sys.byteorder == "little"


def vector_from_base64(data: str) -> Vector:
    """A little-endian float32 vector sent as base64 (the OpenAI wire's
    ``encoding_format: "base64"``): decoded with one copy into an ``array("f")``."""
    vector = array("f", base64.b64decode(data))
    if not _LITTLE:
        vector.byteswap()
    return vector


def vector_from_floats(values: Sequence[float]) -> Vector:
    """A vector sent as a JSON list of numbers, as float32."""
    return array("f", values)


def checked_part(part: EmbeddingPart, call: EmbeddingCall, provider: str) -> EmbeddingPart:
    """``part`` if it fits ``call``: a vector per text, all of one length, that length
    ``call.dimensions`` when set; else an :class:`EmbeddingError` saying what is wrong."""
    sent, got = len(call.texts), len(part.vectors)
    if got != sent:
        raise EmbeddingError(provider, f"the server sent {got} vectors for {sent} inputs")
    if not part.vectors:
        return part
    size = len(part.vectors[0])
    for index, vector in enumerate(part.vectors):
        if len(vector) != size:
            raise EmbeddingError(
                provider,
                f"vectors of different dimensions in one answer: input 0 has {size}, "
                f"input {index} has {len(vector)}",
            )
    if size == 0:
        raise EmbeddingError(provider, "the server sent empty vectors")
    if call.dimensions is not None and size != call.dimensions:
        raise EmbeddingError(
            provider, f"asked for {call.dimensions} dimensions, the server sent {size}"
        )
    return part
