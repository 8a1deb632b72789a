"""The window, counting and overflow against a real ``llama-server`` (SmolLM2 135M,
``-c 2048``, one slot): what the server says, not what we guess."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.llama_server import LlamaServer, running_llama_server

from cuca import (
    ContextOverflowError,
    CucaClient,
    HttpContextOverflowError,
    ProviderEndpoint,
    ToolDefinition,
    UnifiedRequest,
)

pytestmark = pytest.mark.slow

CONTEXT = 2048  # running_llama_server's -c


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    with running_llama_server() as running:
        yield running


def client_for(server: LlamaServer) -> CucaClient:
    return CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url)


async def test_llama_server_overflow_is_a_context_overflow_error(server: LlamaServer) -> None:
    request = UnifiedRequest.new("smol").add_user_message("word " * (CONTEXT + 100))
    async with client_for(server) as client:
        with pytest.raises(ContextOverflowError) as info:
            await client.generate(request)
    error = info.value
    assert isinstance(error, HttpContextOverflowError)
    assert error.status == 400
    assert error.limit == CONTEXT
    assert error.requested is not None and error.requested > CONTEXT


async def test_llama_server_count_tokens_equals_the_turns_prompt_tokens(
    server: LlamaServer,
) -> None:
    request = (
        UnifiedRequest.new("smol")
        .add_system_message("You are terse.")
        .add_user_message("Name three rivers.")
        .add_assistant_message("Nile, Amazon, Danube.")
        .add_user_message("And three mountains?")
        .set_max_tokens(4)
        .set_temperature(0.0)
    )
    async with client_for(server) as client:
        counted = await client.count_tokens(request)
        answer = await client.generate(request)
    assert answer.response.usage is not None
    assert counted.exact
    assert counted.method == "llama-server /tokenize"
    assert counted.tokens == answer.response.usage.prompt_tokens


async def test_llama_server_count_tokens_grows_with_tools(server: LlamaServer) -> None:
    plain = UnifiedRequest.new("smol").add_user_message("Weather in Paris?")
    tool = ToolDefinition(
        "get_weather",
        "The weather in a city",
        {"type": "object", "properties": {"city": {"type": "string"}}},
    )
    async with client_for(server) as client:
        without = await client.count_tokens(plain)
        with_tool = await client.count_tokens(plain.add_tool(tool))
    # the default template ignores tools: the same body, counted the same way
    assert with_tool.tokens >= without.tokens > 5


async def test_llama_server_model_info_reads_props(server: LlamaServer) -> None:
    async with client_for(server) as client:
        info = await client.model_info("smol")
    assert info.context_window == CONTEXT
    assert info.trained_context == 8192  # SmolLM2's GGUF context_length
    assert info.source == "llama-server /props"
