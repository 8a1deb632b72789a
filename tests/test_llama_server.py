"""Against a real ``llama-server`` on loopback, running SmolLM2 135M.

The server's own bytes are recorded by a pass-through httpx transport, so the usage
cuca reports is compared with what the server sent, not with guesses.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.llama_server import LlamaServer, running_llama_server

from cuca import (
    CucaClient,
    CucaError,
    HttpStatusError,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingEffort,
    ToolCall,
    UnifiedRequest,
    UnifiedResponse,
)
from cuca.providers.base import Item
from cuca.providers.llamacpp import LlamaCppConfig, LlamaRoute

HERE = Path(__file__).resolve().parent
# A real tool-capable template when the template corpus has been fetched (see
# support/corpus.py), else our small ChatML + Hermes-style tools template.
CORPUS_TEMPLATE = HERE.parent / ".cache" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
OWN_TEMPLATE = HERE / "templates" / "chatml_tools.jinja"
TOOL_TEMPLATE = CORPUS_TEMPLATE if CORPUS_TEMPLATE.is_file() else OWN_TEMPLATE
SERVER_KEY = "llama-test-key-7c1e"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    with running_llama_server() as server:
        yield server


@pytest.fixture(scope="session")
def llama_tool_server() -> Iterator[LlamaServer]:
    """A second server with a tool-capable template, requiring an API key."""
    args = ["--jinja", "--chat-template-file", str(TOOL_TEMPLATE), "--api-key", SERVER_KEY]
    with running_llama_server(args) as server:
        yield server


class _Tee(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, record: bytearray) -> None:
        self._inner = inner
        self._record = record

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._record.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class RecordingTransport(httpx.AsyncBaseTransport):
    """Passes requests to the network and keeps a copy of every response body."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.bodies: list[bytearray] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        record = bytearray()
        self.bodies.append(record)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, record),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def server_frames(body: bytes) -> list[dict[str, Any]]:
    """The JSON frames of a recorded event stream (by hand: no cuca code involved)."""
    frames = []
    for line in body.decode().splitlines():
        if line.startswith("data: {"):
            frames.append(json.loads(line[len("data: ") :]))
    return frames


async def turn(
    url: str, request: UnifiedRequest, config: LlamaCppConfig | None = None, key: str | None = None
) -> tuple[list[Item], UnifiedResponse | None, bytes]:
    transport = RecordingTransport()
    items: list[Item] = []
    async with httpx.AsyncClient(transport=transport, timeout=None) as http:
        client = CucaClient(
            ProviderEndpoint.LLAMA_CPP,
            base_url=url,
            api_key=key,
            provider_config=config,
            http_client=http,
        )
        async with client, client.generate_stream(request) as stream:
            async for item in stream:
                items.append(item)
    return items, stream.response, bytes(transport.bodies[-1])


def prompt(text: str, max_tokens: int = 12) -> UnifiedRequest:
    return (
        UnifiedRequest.new("smollm2")
        .add_system_message("You are a helpful assistant.")
        .add_user_message(text)
        .set_max_tokens(max_tokens)
        .set_temperature(0.0)
    )


def text_of(items: list[Item]) -> str:
    return "".join(item.text for item in items if isinstance(item, Text))


async def test_llama_server_chat_streams_text_and_server_usage(llama_server: LlamaServer) -> None:
    items, response, body = await turn(llama_server.url, prompt("Name a colour."))
    frames = server_frames(body)
    sent_text = "".join(
        f["choices"][0]["delta"].get("content") or "" for f in frames if f.get("choices")
    )
    (usage,) = [f["usage"] for f in frames if f.get("usage")]
    assert items, "the model produced nothing"
    assert all(isinstance(item, Text) for item in items)
    assert text_of(items) == sent_text
    assert response is not None
    assert response.usage is not None
    assert response.usage.prompt_tokens == usage["prompt_tokens"]
    assert response.usage.completion_tokens == usage["completion_tokens"]
    assert 0 < response.usage.completion_tokens <= 12
    assert response.finish_reason in {"stop", "length"}


async def test_llama_server_chat_repeated_prompt_reports_cached_tokens(
    llama_server: LlamaServer,
) -> None:
    request = prompt("Repeat after me: the quick brown fox jumps over the lazy dog.", 4)
    await turn(llama_server.url, request)
    _, response, body = await turn(llama_server.url, request)
    (usage,) = [f["usage"] for f in server_frames(body) if f.get("usage")]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    assert response is not None
    assert response.prompt_cache_usage is not None
    assert response.prompt_cache_usage.read_tokens == cached


async def test_llama_server_chat_accepts_thinking_effort(llama_server: LlamaServer) -> None:
    request = prompt("Say hi.", 4).set_thinking(ThinkingEffort.LOW)
    items, response, _ = await turn(llama_server.url, request)
    assert all(isinstance(item, (Text, Thinking)) for item in items)
    assert response is not None and response.usage is not None


@pytest.mark.parametrize("n_predict", [1, 5])
async def test_llama_server_completion_honours_n_predict(
    llama_server: LlamaServer, n_predict: int
) -> None:
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    items, response, body = await turn(
        llama_server.url, prompt("Count to twenty.", n_predict), config
    )
    frames = server_frames(body)
    final = frames[-1]
    assert final["stop"] is True
    assert final["tokens_predicted"] <= n_predict
    assert items, "the model produced nothing"
    assert all(isinstance(item, Text) and item.text for item in items)
    assert len(items) <= n_predict
    assert text_of(items) == "".join(f.get("content", "") for f in frames if not f["stop"])
    assert response is not None
    assert response.usage is None


async def test_llama_server_completion_default_n_predict(llama_server: LlamaServer) -> None:
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    request = prompt("Tell me a long story about a dragon.").set_max_tokens(None)
    _, _, body = await turn(llama_server.url, request, config)
    final = server_frames(body)[-1]
    assert final["tokens_predicted"] <= 128
    assert final["generation_settings"]["n_predict"] == 128


async def test_llama_server_tools_decode_without_error(llama_tool_server: LlamaServer) -> None:
    config = LlamaCppConfig(api_key=SERVER_KEY)
    question = prompt("What is the weather in Paris? Use the tool.", 48)
    _, plain, _ = await turn(llama_tool_server.url, question, config)
    request = question.add_tool(
        "get_weather",
        "Get the current weather for a city",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    items, response, _ = await turn(llama_tool_server.url, request, config)
    assert not [item for item in items if isinstance(item, CucaError)]
    assert all(isinstance(item, (Text, Thinking, ToolCall)) for item in items)
    assert response is not None and response.usage is not None
    assert plain is not None and plain.usage is not None
    assert response.usage.prompt_tokens > plain.usage.prompt_tokens + 20  # tools rendered
    assert response.finish_reason in {"stop", "length", "tool_calls"}


async def test_llama_server_api_key_required_and_sent(llama_tool_server: LlamaServer) -> None:
    with pytest.raises(HttpStatusError) as caught:
        await turn(llama_tool_server.url, prompt("Hi", 2))
    assert caught.value.status == 401
    items, _, _ = await turn(llama_tool_server.url, prompt("Hi", 2), key=SERVER_KEY)
    assert all(isinstance(item, Text) for item in items)
