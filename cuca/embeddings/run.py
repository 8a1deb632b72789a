"""One ``embed`` call: checked inputs, cached vectors, requests admitted and sent
concurrently, answers checked and put back in input order."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from cuca._checks import kind
from cuca.admission import Admission, TurnGate
from cuca.errors import ConfigurationError, HttpStatusError, RateLimitError
from cuca.plugins import TurnOutcome
from cuca.retry import RetryPolicy
from cuca.turn import AttemptHead
from cuca.types import ProviderEndpoint, TokenUsage, UnifiedRequest, UnifiedResponse
from cuca.vectors import (
    POOLINGS,
    EmbeddingCall,
    EmbeddingError,
    EmbeddingPart,
    EmbeddingRoute,
    Pooling,
    Vector,
    checked_part,
)

from .cache import EmbeddingCache
from .result import Embeddings

if TYPE_CHECKING:
    from cuca.backends import Heads
    from cuca.cache import ResponseCache

__all__ = ["DEFAULT_CONCURRENCY", "EmbeddingTarget", "SendTold", "embed"]

DEFAULT_CONCURRENCY = 4
"""Requests of one ``embed`` call in flight at once (the client's rate limiter may
allow fewer)."""

CHARS_PER_TOKEN = 4


class SendTold(Protocol):
    """The client's way of sending one wire request and reading its 2xx JSON answer,
    telling ``heads`` the answer's head (status, headers, what they say of the server's
    rate limits) whatever its status: the HTTP backend's ``request_json``."""

    def __call__(self, wire: Any, heads: Heads | None = None) -> Awaitable[Any]: ...


@attrs.frozen
class EmbeddingTarget:
    """Where an ``embed`` call goes, as the client knows it: its ``provider``, the
    backend's ``route``, the client's ``send`` (its connection pool and the adapter's
    errors, each answer's head told to the request's gates; unused by the local
    engine), its gates, its response cache, the ``endpoint`` cache keys name, and its
    retry policy."""

    provider: ProviderEndpoint
    route: EmbeddingRoute
    send: SendTold
    gates: tuple[TurnGate, ...] = ()
    cache: ResponseCache | None = None
    endpoint: str | None = None
    retry: RetryPolicy = attrs.field(factory=RetryPolicy)


async def embed(
    target: EmbeddingTarget,
    inputs: str | Sequence[str],
    *,
    model: str,
    dimensions: int | None = None,
    pooling: Pooling | None = None,
    batch_size: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Embeddings:
    """The vectors of ``inputs`` on ``target``'s backend (see
    :meth:`cuca.CucaClient.embed`)."""
    route = target.route
    texts = _texts(inputs, route)
    _check_options(target, dimensions, pooling, batch_size, concurrency)
    size = min(batch_size or route.max_inputs, route.max_inputs)
    vectors: list[Vector | None] = [None] * len(texts)
    cache = None
    if target.cache is not None:
        cache = EmbeddingCache(target.cache, target.provider.kind, target.endpoint, model)
    if cache is not None:
        for index, found in enumerate(await cache.lookup(texts, dimensions, pooling)):
            vectors[index] = found
    missing = [index for index, vector in enumerate(vectors) if vector is None]
    chunks = [missing[start : start + size] for start in range(0, len(missing), size)]
    parts: list[EmbeddingPart | None] = [None] * len(chunks)
    limiter = trio.CapacityLimiter(concurrency)
    failures: list[Exception] = []

    async def run(number: int, indices: list[int], scope: trio.CancelScope) -> None:
        try:
            async with limiter:
                call = EmbeddingCall(tuple(texts[i] for i in indices), model, dimensions, pooling)
                parts[number] = await _admitted(target, call)
        except Exception as exc:  # the first failure ends the call, raised as it is
            failures.append(exc)
            scope.cancel()

    async with trio.open_nursery() as nursery:
        for number, indices in enumerate(chunks):
            nursery.start_soon(run, number, indices, nursery.cancel_scope)
    if failures:
        raise failures[0]
    answered: list[EmbeddingPart] = [part for part in parts if part is not None]
    for indices, part in zip(chunks, answered, strict=True):
        for index, vector in zip(indices, part.vectors, strict=True):
            vectors[index] = vector
    done = [vector for vector in vectors if vector is not None]
    _same_size(done, route.provider)
    if cache is not None and missing:
        kept = [done[i] for i in missing]
        await cache.keep([texts[i] for i in missing], kept, dimensions, pooling)
    return Embeddings(
        tuple(done),
        target.provider,
        next((p.model for p in answered if p.model), None) or model,
        _usage(answered),
        cached=len(texts) - len(missing),
        requests=len(chunks),
    )


def _texts(inputs: object, route: EmbeddingRoute) -> tuple[str, ...]:
    """The inputs as a tuple of strings, refused before any request when empty, not
    text, or (on a backend that refuses it) an empty string."""
    if isinstance(inputs, str):
        texts: tuple[str, ...] = (inputs,)
    elif isinstance(inputs, Sequence) and not isinstance(inputs, bytes | bytearray):
        texts = tuple(inputs)
    else:
        raise ConfigurationError(f"embed takes a string or a list of strings, not {kind(inputs)}")
    if not texts:
        raise ConfigurationError("embed needs at least one input: the list is empty")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise ConfigurationError(f"input {index} is {kind(text)}, not a string")
        if route.refuses_empty and not text:
            raise ConfigurationError(
                f"input {index} is an empty string, which {route.name} refuses"
            )
    return texts


def _check_options(
    target: EmbeddingTarget,
    dimensions: object,
    pooling: object,
    batch_size: object,
    concurrency: object,
) -> None:
    for name, value in (("dimensions", dimensions), ("batch_size", batch_size)):
        if value is not None and (type(value) is not int or value < 1):
            raise ConfigurationError(f"{name} must be a positive integer, not {value!r}")
    if type(concurrency) is not int or concurrency < 1:
        raise ConfigurationError(f"concurrency must be a positive integer, not {concurrency!r}")
    if pooling is not None:
        if pooling not in POOLINGS:
            raise ConfigurationError(
                f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}"
            )
        if target.provider != ProviderEndpoint.LOCAL:
            raise ConfigurationError(
                "pooling= is for the local engine: a server pools as it was started "
                "(llama-server --pooling)"
            )


async def _admitted(target: EmbeddingTarget, call: EmbeddingCall) -> EmbeddingPart:
    """One request through the client's gates, as a turn goes through them
    (:class:`~cuca.admission.Admission`): admitted, sent (resent as the retry policy
    says) with every answer's head told to the tickets, settled however it ends."""
    tokens = _estimate(call)

    async def count(request: UnifiedRequest) -> int:
        return tokens

    admission = Admission(target.gates, count)
    await admission.admit(_stand_in(target.provider, call))  # a refusal settles itself
    end = TurnOutcome("cancelled")
    try:
        part = await _sent(target, call, admission)
        if part.prompt_tokens is not None:  # no count (Gemini): the gates keep their estimate
            usage = TokenUsage(part.prompt_tokens, 0)
            end = TurnOutcome(
                "ok", UnifiedResponse(target.provider, part.model or call.model, usage)
            )
    except Exception as exc:
        end = TurnOutcome("error", error=exc)
        raise
    finally:
        await admission.settle(end)
    if admission.failure is not None:  # a gate that could not settle (its store failed)
        raise admission.failure
    return part


class _Attempt:
    """One attempt's :class:`~cuca.backends.Heads`: its answer's head goes to every
    ticket (``told`` remembers that it went, so a route's error is not told twice)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.told = False

    async def head(self, head: AttemptHead) -> None:
        self.told = True
        await self.admission.head(head)

    async def resending(self) -> None:
        await self.admission.resending()


async def _sent(
    target: EmbeddingTarget, call: EmbeddingCall, admission: Admission
) -> EmbeddingPart:
    retry, number = target.retry, 0
    while True:
        attempt = _Attempt(admission)

        async def send(wire: Any, attempt: _Attempt = attempt) -> Any:
            return await target.send(wire, attempt)

        try:
            part = await target.route.embed(call, send)
        except HttpStatusError as exc:
            if not attempt.told:  # a route that failed without an answer's head
                await admission.head(AttemptHead(exc.status, ()))
            hint = exc.retry_after if isinstance(exc, RateLimitError) else None
            delay = None
            if number < retry.max_retries and retry.retries_status(exc.status):
                delay = retry.delay(number, None if hint is None else str(hint))
            if delay is None:
                raise
            await trio.sleep(delay)
            await admission.resending()
            number += 1
            continue
        return checked_part(part, call, target.route.provider)


def _stand_in(provider: ProviderEndpoint, call: EmbeddingCall) -> UnifiedRequest:
    """What the gates see of one request: its provider and model, one output token at
    most (an embedding has none; a budget then projects the prompt only)."""
    return UnifiedRequest(model=call.model, provider=provider, max_tokens=1)


def _estimate(call: EmbeddingCall) -> int:
    """The texts' tokens, estimated as the gates estimate a prompt (length / 4)."""
    return sum(math.ceil(len(text) / CHARS_PER_TOKEN) or 1 for text in call.texts)


def _usage(parts: Sequence[EmbeddingPart]) -> TokenUsage | None:
    """The tokens every request reported, or ``None`` if one reported none (and 0
    when nothing was sent)."""
    counts = [part.prompt_tokens for part in parts]
    if any(count is None for count in counts):
        return None
    return TokenUsage(sum(count for count in counts if count is not None), 0)


def _same_size(vectors: Sequence[Vector], provider: str) -> None:
    """Vectors from several requests (and the cache) must agree in length."""
    if not vectors:
        return
    size = len(vectors[0])
    for index, vector in enumerate(vectors):
        if len(vector) != size:
            raise EmbeddingError(
                provider,
                f"vectors of different dimensions: input 0 has {size}, input {index} has "
                f"{len(vector)}",
            )
