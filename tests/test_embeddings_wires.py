"""``client.embed`` on each wire over real loopback HTTP: the requests are the vendor's
documented ones, the transcripts decode, usage and cost are exact where the vendor
reports them, and backends without a route refuse before any request."""

from __future__ import annotations

import json
from decimal import Decimal
from functools import partial
from typing import Any

import attrs
import pytest
import trio
from support.embedding_servers import (
    gemini_embeddings,
    llama_embedding,
    openai_embeddings,
    replay_tokens,
    replay_vector,
)
from support.transcripts import TRANSCRIPTS
from trio.testing import MockClock

from cuca import (
    Budget,
    ConfigurationError,
    CucaClient,
    EmbeddingError,
    HttpStatusError,
    LlamaCppConfig,
    LlamaRoute,
    ProviderEndpoint,
    RateLimiter,
    ResponseCache,
)
from cuca.cost import turn_cost
from cuca.retry import RetryPolicy
from cuca.testing import Reply, open_replay_server
from cuca.types import TokenUsage

TEXTS = [f"document {i}: " + "words " * (i % 5) for i in range(5)]


def whole(name: str) -> Any:
    return json.loads((TRANSCRIPTS / f"{name}.json").read_text())


def values(result: Any) -> list[list[float]]:
    return [list(vector) for vector in result]


def json_reply(body: bytes, status: int = 200) -> Reply:
    return Reply(body, status=status, headers=[("content-type", "application/json")])


def transcript_reply(name: str, status: int = 200) -> Reply:
    return json_reply((TRANSCRIPTS / f"{name}.json").read_bytes(), status)


def openai(url: str, key: str = "k", **options: Any) -> CucaClient:
    return CucaClient(ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key=key, **options)


def gemini(url: str, **options: Any) -> CucaClient:
    return CucaClient(ProviderEndpoint.GOOGLE_GEMINI, base_url=url, api_key="g", **options)


async def test_embed_openai_asks_for_base64_and_reads_usage_and_cost() -> None:
    async with open_replay_server(openai_embeddings) as server:
        async with openai(server.url) as c:
            result = await c.embed(TEXTS, model="text-embedding-3-small")
    (request,) = server.requests
    body = request.json()
    wanted = {"model": "text-embedding-3-small", "input": TEXTS, "encoding_format": "base64"}
    assert body == wanted
    assert request.headers["authorization"] == "Bearer k"
    assert values(result) == [replay_vector(t, 1536) for t in TEXTS]
    tokens = sum(replay_tokens(t) for t in TEXTS)
    assert result.usage == TokenUsage(tokens, 0)
    expected = turn_cost(ProviderEndpoint.OPENAI, "text-embedding-3-small", TokenUsage(tokens, 0))
    assert expected is not None and expected > 0  # genai-prices knows the model
    assert result.cost == expected


async def test_embed_openai_splits_at_2048_inputs_and_keeps_order() -> None:
    texts = [f"t{i}" for i in range(2050)]
    async with open_replay_server(openai_embeddings) as server:
        async with openai(server.url) as c:
            result = await c.embed(texts, model="text-embedding-3-small", dimensions=8)
    assert sorted(len(r.json()["input"]) for r in server.requests) == [2, 2048]
    assert all(r.json()["dimensions"] == 8 for r in server.requests)
    assert values(result) == [replay_vector(t, 8) for t in texts]
    assert result.requests == 2


async def test_embed_openai_empty_string_is_refused_before_any_request() -> None:
    async with open_replay_server(openai_embeddings) as server:
        async with openai(server.url) as c:
            with pytest.raises(ConfigurationError, match="input 1 is an empty string"):
                await c.embed(["a", ""], model="text-embedding-3-small")
    assert server.requests == []


async def test_embed_openai_server_refusal_is_its_http_error() -> None:
    async with open_replay_server(openai_embeddings) as server:
        async with openai(server.url, key="") as c:
            with pytest.raises(HttpStatusError) as caught:
                await c.embed(["a"], model="text-embedding-3-small")
    assert caught.value.status == 401


@pytest.mark.parametrize("name", ["openai/embeddings_base64", "openai/embeddings_float"])
async def test_embed_openai_transcripts_decode_by_index(name: str) -> None:
    reply = transcript_reply(name)
    async with open_replay_server(reply) as server:
        async with openai(server.url) as c:
            result = await c.embed(["first", "second"], model="text-embedding-3-small")
    assert values(result)[1] == [0.5, -0.25, 0.125, 1.0]
    assert result.usage == TokenUsage(8, 0) and result.dimensions == 4


async def test_embed_answer_with_a_missing_vector_is_an_embedding_error() -> None:
    answer = whole("openai/embeddings_base64")
    answer["data"] = answer["data"][:1]
    reply = json_reply(json.dumps(answer).encode())
    async with open_replay_server(reply) as server:
        async with openai(server.url) as c:
            with pytest.raises(EmbeddingError, match="1 vectors for 2 inputs"):
                await c.embed(["first", "second"], model="text-embedding-3-small")


async def test_embed_answer_with_vectors_of_two_lengths_is_an_embedding_error() -> None:
    answer = whole("openai/embeddings_float")
    answer["data"][0]["embedding"] = [0.5, 0.5]
    reply = json_reply(json.dumps(answer).encode())
    async with open_replay_server(reply) as server:
        async with openai(server.url) as c:
            with pytest.raises(EmbeddingError, match="different dimensions"):
                await c.embed(["first", "second"], model="text-embedding-3-small")


@pytest.mark.parametrize("provider", [ProviderEndpoint.VLLM, ProviderEndpoint.LM_STUDIO])
async def test_embed_openai_shaped_servers_use_the_same_route(provider: ProviderEndpoint) -> None:
    """vLLM and LM Studio serve OpenAI's route; an empty string is theirs to refuse."""
    async with open_replay_server(openai_embeddings) as server:
        async with CucaClient(provider, base_url=f"{server.url}/v1", api_key="k") as c:
            result = await c.embed(["a", "b"], model="served-model")
            with pytest.raises(HttpStatusError, match="cannot be an empty string"):
                await c.embed(["a", ""], model="served-model")
    assert [r.path for r in server.requests] == ["/v1/embeddings"] * 2
    assert server.requests[0].json()["encoding_format"] == "base64"
    assert len(result) == 2 and result.cost is None  # a server of your own has no price


async def test_embed_gemini_one_text_uses_embed_content() -> None:
    async with open_replay_server(gemini_embeddings) as server:
        async with gemini(server.url) as c:
            result = await c.embed("one text", model="gemini-embedding-001", dimensions=768)
    (request,) = server.requests
    assert request.path == "/v1beta/models/gemini-embedding-001:embedContent"
    assert request.json() == {
        "model": "models/gemini-embedding-001",
        "content": {"parts": [{"text": "one text"}]},
        "outputDimensionality": 768,
    }
    assert request.headers["x-goog-api-key"] == "g"
    assert values(result) == [replay_vector("one text", 768)]
    assert result.usage is None and result.cost is None  # no counts in the answer


async def test_embed_gemini_batches_of_100_each_text_its_own_content() -> None:
    texts = [f"text {i}" for i in range(250)]
    async with open_replay_server(gemini_embeddings) as server:
        async with gemini(server.url) as c:
            result = await c.embed(texts, model="models/gemini-embedding-001")
    sizes = sorted(len(r.json()["requests"]) for r in server.requests)
    assert sizes == [50, 100, 100]
    assert all(r.path.endswith(":batchEmbedContents") for r in server.requests)
    first = server.requests[0].json()["requests"][0]
    assert first["model"] == "models/gemini-embedding-001" and len(first["content"]["parts"]) == 1
    assert values(result) == [replay_vector(t, 3072) for t in texts]
    assert result.requests == 3 and result.usage is None


async def test_embed_gemini_budget_keeps_its_estimate_when_no_tokens_are_reported() -> None:
    budget = Budget(tokens=1_000_000)
    async with open_replay_server(gemini_embeddings) as server:
        async with gemini(server.url, plugins=[budget]) as c:
            await c.embed(["x" * 40, "y" * 80], model="gemini-embedding-001")
    assert (await budget.spent())["tokens"] == 10 + 20 + 1


@pytest.mark.parametrize(
    ("name", "method"),
    [("gemini/embed_content", "embedContent"), ("gemini/batch_embed_contents", "batch")],
)
async def test_embed_gemini_transcripts_decode(name: str, method: str) -> None:
    reply = transcript_reply(name)
    texts = ["first"] if method == "embedContent" else ["first", "second"]
    async with open_replay_server(reply) as server:
        async with gemini(server.url) as c:
            result = await c.embed(texts, model="gemini-embedding-001")
    assert len(result) == len(texts) and result.dimensions == 4


async def test_embed_gemini_over_100_is_refused_by_the_wire_as_documented() -> None:
    """The server's refusal of 101 requests, which the route's split never sends."""
    reply = transcript_reply("gemini/batch_embed_too_many", 400)
    async with open_replay_server(reply) as server:
        async with gemini(server.url) as c:
            with pytest.raises(HttpStatusError, match="at most 100 requests"):
                await c.embed(["a", "b"], model="gemini-embedding-001")


async def test_embed_llama_cpp_native_route_posts_content() -> None:
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    async with open_replay_server(llama_embedding) as server:
        client = CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url, provider_config=config)
        async with client as c:
            result = await c.embed(TEXTS)
    (request,) = server.requests
    assert request.path == "/embedding" and request.json() == {"content": TEXTS}
    assert values(result) == [replay_vector(t, 576) for t in TEXTS]
    assert result.usage is None  # the native route reports no counts


async def test_embed_llama_cpp_per_token_rows_are_an_embedding_error() -> None:
    reply = transcript_reply("llama_cpp/embedding_pooling_none")
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    async with open_replay_server(reply) as server:
        client = CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url, provider_config=config)
        async with client as c:
            with pytest.raises(EmbeddingError, match="--pooling mean"):
                await c.embed(["one"])


@pytest.mark.parametrize(
    ("provider", "base_url"),
    [
        (ProviderEndpoint.ANTHROPIC, "/v1"),
        (ProviderEndpoint.DEEPSEEK, "/v1"),
        (ProviderEndpoint.DEEPSEEK, "/anthropic"),
    ],
)
async def test_embed_without_a_route_is_refused_before_any_request(
    provider: ProviderEndpoint, base_url: str
) -> None:
    async with open_replay_server(openai_embeddings) as server:
        async with CucaClient(provider, base_url=server.url + base_url, api_key="k") as c:
            with pytest.raises(ConfigurationError, match=f"{provider} has no embedding route"):
                await c.embed(["a"], model="m")
    assert server.requests == []


async def test_embed_openai_without_a_key_at_openai_is_refused_before_any_request() -> None:
    async with CucaClient(ProviderEndpoint.OPENAI, api_key="") as c:
        with pytest.raises(ConfigurationError, match="requires an API key"):
            await c.embed(["a"], model="text-embedding-3-small")


async def test_embed_cache_and_budget_on_a_real_wire() -> None:
    cache, budget = ResponseCache(), Budget(usd=1.0)
    async with open_replay_server(openai_embeddings) as server:
        async with openai(server.url, plugins=[cache, budget]) as c:
            first = await c.embed(TEXTS, model="text-embedding-3-small")
            again = await c.embed(TEXTS, model="text-embedding-3-small")
    assert len(server.requests) == 1 and again.cached == len(TEXTS) and again.cost == 0
    assert values(again) == values(first)
    assert first.cost is not None
    assert Decimal(str((await budget.spent())["usd"])) == first.cost


class Headed:
    """The OpenAI replay, with ``headers`` added to the answer of request number
    ``when`` (from 1) and the trio time each request arrived."""

    def __init__(self, when: int, headers: list[tuple[str, str]], status: int = 200) -> None:
        self.when, self.headers, self.status = when, headers, status
        self.times: list[float] = []

    def __call__(self, request: Any) -> Reply:
        self.times.append(trio.current_time())
        reply = openai_embeddings(request)
        if len(self.times) != self.when:
            return reply
        if self.status != 200:
            error = {"error": {"message": "slow down", "type": "rate_limit_exceeded"}}
            reply = json_reply(json.dumps(error).encode(), self.status)
        return attrs.evolve(reply, headers=[*reply.headers, *self.headers])


async def test_embed_rate_limiter_steered_by_a_2xx_answers_headers(
    autojump_clock: MockClock,
) -> None:
    """A 2xx embedding answer whose headers say no request remains until a reset in 2 s
    pauses the client's limiter as a turn's answer does: the next call sharing it
    reaches the server only after the reset."""
    limiter = RateLimiter(clock=trio.current_time)
    used_up = [("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "2s")]
    server_replies = Headed(1, used_up)
    async with open_replay_server(server_replies) as server:
        async with openai(server.url, rate_limiter=limiter) as c:
            await c.embed(["a"], model="text-embedding-3-small")
            await c.embed(["b"], model="text-embedding-3-small")
    first, second = server_replies.times
    assert second - first >= 2.0, (
        f"the second embed call reached the server {second - first:.2f} s after an answer "
        "that said no request remains for 2 s"
    )


async def test_embed_429_retry_after_holds_the_resend_and_the_limiter(
    autojump_clock: MockClock,
) -> None:
    """A 429 with ``Retry-After: 3`` on an embedding request: the resend waits the 3 s
    (not the policy's 0.5 s backoff), and the limiter is paused for them, so a call
    sharing it started meanwhile waits too."""
    limiter = RateLimiter(clock=trio.current_time)
    server_replies = Headed(1, [("retry-after", "3")], status=429)
    policy = RetryPolicy(initial_delay=0.5, jitter=0)
    async with open_replay_server(server_replies) as server:
        async with openai(server.url, rate_limiter=limiter, retry=policy) as c:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(c.embed, ["a"], model="text-embedding-3-small"))
                await trio.sleep(1.0)
                nursery.start_soon(partial(c.embed, ["b"], model="text-embedding-3-small"))
    refused, *later = server_replies.times
    assert len(later) == 2
    assert all(t - refused >= 3.0 for t in later), (
        f"requests reached the server {[round(t - refused, 2) for t in later]} s after a "
        "429 that said Retry-After: 3"
    )
