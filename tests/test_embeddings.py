"""``embed`` over any route: inputs checked before a request, split at the route's limit
and sent concurrently, answers checked, vectors back in input order; the rate limiter,
a budget and the response cache take part as in a turn. The routes here are scripted;
the wires are tested in test_embeddings_wires.py, the engine in test_embeddings_local.py."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio

from cuca import (
    Budget,
    BudgetExceeded,
    ConfigurationError,
    EmbeddingError,
    RateLimiter,
    ResponseCache,
    ServerError,
)
from cuca.embeddings import EmbeddingTarget, embed
from cuca.retry import RetryPolicy
from cuca.types import ProviderEndpoint
from cuca.vectors import EmbeddingCall, EmbeddingPart, vector_from_base64

OPENAI = ProviderEndpoint.OPENAI


def vector_of(text: str, size: int = 4) -> array[float]:
    """A vector that says which text it belongs to."""
    return array("f", [float(len(text)), float(sum(map(ord, text)) % 997)] + [0.5] * (size - 2))


@attrs.define
class ScriptedRoute:
    """A route that answers from ``answer`` and records every call."""

    answer: Callable[[EmbeddingCall], EmbeddingPart] = attrs.field(
        default=lambda call: EmbeddingPart(
            tuple(vector_of(t) for t in call.texts), sum(len(t) for t in call.texts)
        )
    )
    name: str = "POST /v1/embeddings"
    provider: str = "openai"
    max_inputs: int = 3
    refuses_empty: bool = True
    calls: list[EmbeddingCall] = attrs.field(factory=list)
    in_flight: int = 0
    most_in_flight: int = 0

    async def embed(self, call: EmbeddingCall, send: Any) -> EmbeddingPart:
        self.calls.append(call)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await trio.sleep(0.01)
            return self.answer(call)
        finally:
            self.in_flight -= 1


async def no_send(request: Any, heads: Any = None) -> Any:
    raise AssertionError("the scripted route sends nothing")


def target(route: ScriptedRoute, **options: Any) -> EmbeddingTarget:
    return EmbeddingTarget(OPENAI, route, no_send, **options)


TEXTS = [f"text number {i}" + "!" * i for i in range(8)]


async def test_embed_returns_vectors_in_input_order_across_concurrent_requests() -> None:
    route = ScriptedRoute()
    result = await embed(target(route), TEXTS, model="text-embedding-3-small")
    assert [list(v) for v in result] == [list(vector_of(t)) for t in TEXTS]
    assert sorted(len(call.texts) for call in route.calls) == [2, 3, 3]
    assert route.most_in_flight > 1  # sent concurrently
    assert result.requests == 3 and result.cached == 0
    assert result.usage is not None and result.usage.prompt_tokens == sum(map(len, TEXTS))
    assert result.usage.completion_tokens == 0


async def test_embed_concurrency_and_batch_size_bound_the_requests() -> None:
    route = ScriptedRoute(max_inputs=100)
    await embed(target(route), TEXTS, model="m", batch_size=2, concurrency=1)
    assert [len(call.texts) for call in route.calls] == [2, 2, 2, 2]
    assert route.most_in_flight == 1


async def test_embed_one_string_is_one_input() -> None:
    result = await embed(target(ScriptedRoute()), "hello", model="m")
    assert len(result) == 1 and list(result[0]) == list(vector_of("hello"))


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([], "at least one input: the list is empty"),
        (["a", ""], "input 1 is an empty string, which POST /v1/embeddings refuses"),
        (["a", 3], r"input 1 is 3 \(int\), not a string"),
        (b"bytes", r"a string or a list of strings, not b'bytes' \(bytes\)"),
    ],
)
async def test_embed_refuses_bad_input_before_any_request(inputs: Any, message: str) -> None:
    route = ScriptedRoute()
    with pytest.raises(ConfigurationError, match=message):
        await embed(target(route), inputs, model="m")
    assert route.calls == []


async def test_embed_empty_string_goes_where_the_backend_takes_it() -> None:
    route = ScriptedRoute(refuses_empty=False)
    result = await embed(target(route), ["", "x"], model="m")
    assert len(result) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dimensions": 0}, "dimensions must be a positive integer"),
        ({"batch_size": -1}, "batch_size must be a positive integer"),
        ({"concurrency": 0}, "concurrency must be a positive integer"),
        ({"pooling": "mean"}, "pooling= is for the local engine"),
    ],
)
async def test_embed_refuses_bad_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        await embed(target(ScriptedRoute()), ["a"], model="m", **options)


async def test_embed_answer_with_fewer_vectors_than_inputs_is_an_embedding_error() -> None:
    route = ScriptedRoute(answer=lambda call: EmbeddingPart((vector_of("x"),), 1))
    with pytest.raises(EmbeddingError, match="the server sent 1 vectors for 3 inputs"):
        await embed(target(route), TEXTS[:3], model="m")


async def test_embed_answer_with_more_vectors_than_inputs_is_an_embedding_error() -> None:
    """A server that answers 3 texts with 4 vectors: which vector is whose cannot be
    known, so the call fails rather than guess."""
    route = ScriptedRoute(answer=lambda call: EmbeddingPart((vector_of("x"),) * 4, 1))
    with pytest.raises(EmbeddingError, match="the server sent 4 vectors for 3 inputs"):
        await embed(target(route), TEXTS[:3], model="m")


async def test_embed_answer_with_vectors_of_two_sizes_is_an_embedding_error() -> None:
    def answer(call: EmbeddingCall) -> EmbeddingPart:
        sizes = [4, 5, 4][: len(call.texts)]
        pairs = zip(call.texts, sizes, strict=True)
        return EmbeddingPart(tuple(vector_of(t, s) for t, s in pairs), 3)

    with pytest.raises(EmbeddingError, match="input 0 has 4, input 1 has 5"):
        await embed(target(ScriptedRoute(answer=answer)), TEXTS[:3], model="m")


async def test_embed_requests_that_disagree_on_dimensions_are_an_embedding_error() -> None:
    def answer(call: EmbeddingCall) -> EmbeddingPart:
        size = 4 if call.texts[0] == TEXTS[0] else 6
        return EmbeddingPart(tuple(vector_of(t, size) for t in call.texts), 1)

    with pytest.raises(EmbeddingError, match="input 0 has 4, input 3 has 6"):
        await embed(target(ScriptedRoute(answer=answer)), TEXTS, model="m")


async def test_embed_vectors_not_of_the_dimensions_asked_are_an_embedding_error() -> None:
    with pytest.raises(EmbeddingError, match="asked for 8 dimensions, the server sent 4"):
        await embed(target(ScriptedRoute()), TEXTS[:2], model="m", dimensions=8)


async def test_embed_without_token_counts_has_no_usage_and_no_cost() -> None:
    """Gemini's answer carries no counts: usage is None, never an estimate."""
    route = ScriptedRoute(
        answer=lambda call: EmbeddingPart(tuple(vector_of(t) for t in call.texts), None)
    )
    result = await embed(target(route), TEXTS, model="gemini-embedding-001")
    assert result.usage is None and result.cost is None


async def test_embed_cache_sends_only_texts_not_seen_before() -> None:
    cache = ResponseCache()
    route = ScriptedRoute()
    first = await embed(target(route, cache=cache), TEXTS[:4], model="m")
    second = await embed(target(route, cache=cache), TEXTS, model="m")
    sent = [text for call in route.calls for text in call.texts]
    assert sorted(sent) == sorted(TEXTS)  # the first four went once, the rest once
    assert second.cached == 4 and second.requests == 2
    assert [list(v) for v in second][:4] == [list(v) for v in first]
    assert second.usage is not None and second.usage.prompt_tokens == sum(map(len, TEXTS[4:]))
    third = await embed(target(route, cache=cache), TEXTS[:2], model="m")
    assert third.cached == 2 and third.requests == 0 and third.cost == 0
    assert cache.hits == 6


async def test_embed_cache_keys_include_model_and_dimensions() -> None:
    cache = ResponseCache()
    route = ScriptedRoute()
    await embed(target(route, cache=cache), ["a"], model="m")
    await embed(target(route, cache=cache), ["a"], model="other")
    assert len(route.calls) == 2


async def test_embed_cache_keeps_vectors_bit_for_bit() -> None:
    cache = ResponseCache()
    odd = array("f", [1e-38, -0.0, 3.4e38, 0.1])
    route = ScriptedRoute(answer=lambda call: EmbeddingPart((odd,) * len(call.texts), 1))
    await embed(target(route, cache=cache), ["a"], model="m")
    again = await embed(target(route, cache=cache), ["a"], model="m")
    assert again.cached == 1 and again[0].tobytes() == odd.tobytes()


async def test_embed_budget_charges_the_reported_tokens() -> None:
    budget = Budget(tokens=10_000)
    await embed(target(ScriptedRoute(), gates=(budget,)), TEXTS, model="m")
    assert (await budget.spent())["tokens"] == sum(map(len, TEXTS))


async def test_embed_budget_refuses_a_request_that_would_pass_it() -> None:
    budget = Budget(tokens=5)
    route = ScriptedRoute()
    with pytest.raises(BudgetExceeded):
        await embed(target(route, gates=(budget,)), ["x" * 400], model="m")
    assert route.calls == []


async def test_embed_budget_keeps_its_estimate_when_the_vendor_counts_nothing() -> None:
    budget = Budget(tokens=10_000)
    route = ScriptedRoute(
        answer=lambda call: EmbeddingPart(tuple(vector_of(t) for t in call.texts), None)
    )
    await embed(target(route, gates=(budget,)), ["x" * 40], model="m")
    assert (await budget.spent())["tokens"] == 10 + 1  # 40 chars / 4, plus the one output


async def test_embed_rate_limiter_slots_bound_requests_in_flight() -> None:
    limiter = RateLimiter(max_concurrent=1)
    route = ScriptedRoute()
    await embed(target(route, gates=(limiter,)), TEXTS, model="m", concurrency=4)
    assert route.most_in_flight == 1 and len(route.calls) == 3


async def test_embed_server_error_is_retried_then_answers() -> None:
    failures = [ServerError(503, "busy", None)]

    def answer(call: EmbeddingCall) -> EmbeddingPart:
        if failures:
            raise failures.pop()
        return EmbeddingPart(tuple(vector_of(t) for t in call.texts), 1)

    route = ScriptedRoute(answer=answer)
    policy = RetryPolicy(initial_delay=0.0, jitter=0.0)
    result = await embed(target(route, retry=policy), ["a"], model="m")
    assert len(route.calls) == 2 and len(result) == 1


async def test_embed_error_after_the_retries_is_raised() -> None:
    def answer(call: EmbeddingCall) -> EmbeddingPart:
        raise ServerError(503, "busy", None)

    route = ScriptedRoute(answer=answer)
    with pytest.raises(ServerError):
        once = RetryPolicy(max_retries=1, initial_delay=0.0)
        await embed(target(route, retry=once), ["a"], model="m")
    assert len(route.calls) == 2


def test_vector_from_base64_reads_little_endian_float32() -> None:
    import base64
    import struct

    data = base64.b64encode(struct.pack("<3f", 1.5, -2.0, 0.25)).decode()
    assert list(vector_from_base64(data)) == [1.5, -2.0, 0.25]
