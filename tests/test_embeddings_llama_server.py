"""``client.embed`` against a real ``llama-server --embeddings --pooling mean`` (SmolLM2):
its OpenAI-shaped ``/v1/embeddings`` (the chat route's) and its native ``/embedding``
give the same vectors, which point where the local engine's do."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.llama_server import LlamaServer, running_llama_server
from support.models import load_model

from cuca import CucaClient, LlamaCppConfig, LlamaRoute, ProviderEndpoint

pytestmark = pytest.mark.slow

TEXTS = ["The cat sat on the mat.", "Trio is a library.", "¿Dónde está la biblioteca?"]


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    with running_llama_server(["--embeddings", "--pooling", "mean"]) as running:
        yield running


def unit(vector: Any) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


def close(a: Any, b: Any, tolerance: float) -> bool:
    return all(abs(x - y) <= tolerance for x, y in zip(a, b, strict=True))


async def test_embed_llama_server_chat_route_reports_exact_tokens(server: LlamaServer) -> None:
    async with CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url) as client:
        result = await client.embed(TEXTS)
    assert len(result) == 3 and result.dimensions == 576
    async with httpx.AsyncClient() as http:
        counts = []
        for text in TEXTS:
            answer = await http.post(
                f"{server.url}/tokenize", json={"content": text, "add_special": True}
            )
            counts.append(len(answer.json()["tokens"]))
    assert result.usage is not None and result.usage.prompt_tokens == sum(counts)
    assert all(abs(math.sqrt(sum(v * v for v in vector)) - 1) < 1e-4 for vector in result)


async def test_embed_llama_server_native_route_gives_the_same_vectors(server: LlamaServer) -> None:
    native = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    async with CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url) as client:
        oai = await client.embed(TEXTS)
    client = CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url, provider_config=native)
    async with client:
        own = await client.embed(TEXTS)
    assert own.usage is None  # the native route reports no counts
    assert all(close(a, b, 1e-5) for a, b in zip(own, oai, strict=True))


async def test_embed_llama_server_and_the_local_engine_agree(server: LlamaServer) -> None:
    """The same model and pooling in process: the same tokens, and the server's unit
    vectors point where the local engine's do. Not bit for bit: llama-server and
    llama-cpp-python are two builds of llama.cpp whose kernels round differently
    (measured: cosine 0.99905 to 0.99990, elements up to 0.0095 apart); bit-for-bit
    equality is checked against llama-cpp-python itself (test_embeddings_local.py)."""
    async with CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url) as client:
        served = await client.embed(TEXTS)
    with load_model("smollm2") as model:
        async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
            local = await client.embed(TEXTS, pooling="mean")
    assert served.usage is not None and local.usage is not None
    assert served.usage.prompt_tokens == local.usage.prompt_tokens
    for mine, theirs in zip(local, served, strict=True):
        cosine = sum(x * y for x, y in zip(unit(mine), theirs, strict=True))
        assert cosine > 0.998, f"the local and served vectors point apart: cosine {cosine}"
