"""``cuca serve`` on the local engine under 32 concurrent streaming clients: none is
lost, and what each client reads through the server equals its conversation run
alone on the engine."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from support.models import THREADS, model_path

from cuca import CucaClient, ProviderEndpoint, UnifiedRequest
from cuca.engine import LocalModel
from cuca.serve import Backend, ServeApp, serve
from cuca.types import Text

pytestmark = pytest.mark.slow


@asynccontextmanager
async def served(client: CucaClient) -> AsyncIterator[str]:
    app = ServeApp({"m": Backend(client)})
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, app, "127.0.0.1", 0)
        yield url
        nursery.cancel_scope.cancel()


def _ask(text: str, max_tokens: int) -> UnifiedRequest:
    request = UnifiedRequest.new("m").add_user_message(text).set_max_tokens(max_tokens)
    return request.set_temperature(0)


@pytest.fixture(scope="module")
def parallel_model() -> Iterator[LocalModel]:
    with LocalModel.load(model_path("smollm2"), n_seq=4, **THREADS) as model:
        yield model


async def _stream_text(http: httpx.AsyncClient, url: str, prompt: str) -> str:
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": 6,
        "temperature": 0,
        "messages": [{"role": "user", "content": prompt}],
    }
    pieces: list[str] = []
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as answer:
        async for line in answer.aiter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    pieces.append(choice["delta"].get("content") or "")
    return "".join(pieces)


async def test_serve_32_streaming_clients_each_get_their_conversation_run_alone(
    parallel_model: LocalModel,
) -> None:
    prompts = [f"Say the number {n} in words." for n in range(32)]
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=parallel_model) as client:
        alone = {}
        for prompt in prompts:
            done = await client.generate(_ask(prompt, 6))
            alone[prompt] = "".join(b.text for b in done.blocks if isinstance(b, Text))
        served_texts: dict[str, str] = {}
        limits = httpx.Limits(max_connections=32)
        async with served(client) as url, httpx.AsyncClient(limits=limits, timeout=None) as http:

            async def one(prompt: str) -> None:
                served_texts[prompt] = await _stream_text(http, url, prompt)

            async with trio.open_nursery() as nursery:
                for prompt in prompts:
                    nursery.start_soon(one, prompt)
    assert served_texts == alone  # none lost, each the conversation run alone
