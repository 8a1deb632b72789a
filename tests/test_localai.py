"""LocalAI as a documented target (seed 004, docs/providers/localai.md): the two-request
Rome weather round trip of seed 004's "Worked example", over loopback HTTP against
transcripts in LocalAI's own chunk shape, at arbitrary chunk boundaries."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.transcripts import transcript

from cuca import (
    AnthropicThinkingParams,
    ConfigurationError,
    CucaClient,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingConfig,
    TokenUsage,
    ToolCall,
    ToolDefinition,
    UnifiedRequest,
)
from cuca.testing import Reply, chunk_sizes, open_replay_server

# Seed 004, "Worked example": the request's tool and message, as LocalAI documents them.
SEED_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SEED_REASONING = (
    "Okay, the user is asking about the weather in Rome... "
    "I need to call get_weather with city Rome."
)
WEATHER = '{"city": "Rome", "temperature_c": 22, "condition": "sunny"}'
FIRST = (
    UnifiedRequest.new("your-reasoning-model")
    .add_user_message("What is the weather in Rome?")
    .add_tool(
        ToolDefinition(
            "get_weather",
            "Get the current weather for a city",
            SEED_TOOL["function"]["parameters"],  # type: ignore[index]
        )
    )
)
REPLIES = ["localai/interleaved_tool_call", "localai/tool_result_answer"]


def replies(draw_sizes: Any = None) -> list[Reply]:
    out = []
    for name in REPLIES:
        raw = transcript(name)
        out.append(Reply(raw, chunks=draw_sizes(len(raw)) if draw_sizes else None))
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_seed_004_rome_weather_round_trip(data: st.DataObject) -> None:
    """Seed 004: "An assistant turn that both reasons and calls a tool returns the two
    fields side by side" and "Your client runs the tool, then sends the conversation back
    with: 1. the original assistant message (including its reasoning and tool_calls), and
    2. a tool role message carrying the tool result." — with "reasoning_content as an
    alias for reasoning" on the way back, and max_tokens (the key LocalAI reads)."""

    def sizes(length: int) -> list[int]:
        return data.draw(chunk_sizes(length, max_chunks=30))

    async with open_replay_server(replies(sizes)) as server:
        async with CucaClient(ProviderEndpoint.VLLM, base_url=f"{server.url}/v1") as client:
            first = await client.generate(FIRST.set_max_tokens(512))
            follow_up = (
                FIRST.set_max_tokens(512)
                .add_message(first.message)
                .add_tool_result("call_abc123", WEATHER, name="get_weather")
            )
            second = await client.generate(follow_up)
        sent = [request.json() for request in server.requests]
        paths = [request.path for request in server.requests]

    # The first turn: the seed's reasoning and tool call, side by side.
    assert first.blocks == (
        Thinking(SEED_REASONING, provider=ProviderEndpoint.VLLM),
        ToolCall("call_abc123", "get_weather", {"city": "Rome"}),
    )
    assert first.response.finish_reason == "tool_calls"
    assert first.response.usage == TokenUsage(182, 41)

    # The first request, key by key.
    assert paths == ["/v1/chat/completions", "/v1/chat/completions"]
    assert sent[0] == {
        "model": "your-reasoning-model",
        "messages": [{"role": "user", "content": "What is the weather in Rome?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 512,
        "tools": [SEED_TOOL],
    }

    # The follow-up, key by key: the assistant turn keeps its reasoning and tool_calls.
    body = sent[1]
    assert list(body) == ["model", "messages", "stream", "stream_options", "max_tokens", "tools"]
    assert body["model"] == "your-reasoning-model"
    assert body["max_tokens"] == 512
    assert body["tools"] == [SEED_TOOL]
    user, assistant, tool = body["messages"]
    assert user == {"role": "user", "content": "What is the weather in Rome?"}
    assert list(assistant) == ["role", "content", "reasoning_content", "tool_calls"]
    assert assistant["role"] == "assistant"
    assert assistant["content"] is None
    assert assistant["reasoning_content"] == SEED_REASONING
    (call,) = assistant["tool_calls"]
    assert call["id"] == "call_abc123"
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert call["function"]["arguments"] == '{"city": "Rome"}'
    assert tool == {"role": "tool", "tool_call_id": "call_abc123", "content": WEATHER}

    # The second turn: LocalAI resumed from the returned reasoning and answered.
    assert second.blocks == (
        Thinking("The tool says 22 degrees and sunny.", provider=ProviderEndpoint.VLLM),
        Text("It is sunny in Rome, 22 °C."),
    )
    assert second.response.finish_reason == "stop"
    assert second.response.usage == TokenUsage(236, 19)


async def test_seed_004_openai_endpoint_would_send_a_key_localai_ignores() -> None:
    """Why docs/providers/localai.md selects VLLM: LocalAI's request schema reads
    max_tokens (core/schema/prediction.go) and has no max_completion_tokens, which is
    the key the OPENAI endpoint sends."""
    async with open_replay_server(replies()) as server:
        base = f"{server.url}/v1"
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=base) as client:
            await client.generate(FIRST.set_max_tokens(512))
        async with CucaClient(ProviderEndpoint.VLLM, base_url=base) as client:
            await client.generate(FIRST.set_max_tokens(512))
        openai, vllm = (request.json() for request in server.requests)
    assert "max_tokens" not in openai and openai["max_completion_tokens"] == 512
    assert vllm["max_tokens"] == 512 and "max_completion_tokens" not in vllm


# Seed 004, the Anthropic route's opt-in request, as LocalAI's page writes it.
SEED_MESSAGES_REQUEST = {
    "model": "your-reasoning-model",
    "max_tokens": 1024,
    "thinking": {"type": "enabled"},
    "messages": [{"role": "user", "content": "What is the weather in Rome?"}],
}
PAGE = Path(__file__).resolve().parents[1] / "docs" / "providers" / "localai.md"


def page_body() -> bytes:
    """The request body docs/providers/localai.md shows going out (its ``json`` block
    after "goes out as")."""
    text = PAGE.read_text()
    (block,) = re.findall(r"goes out as:\n\n```json\n(.*?)\n```", text, flags=re.S)
    return block.encode()


async def test_seed_004_anthropic_route_opt_in_without_a_budget() -> None:
    """Seed 004: "The thinking block is only emitted when the request opts in with the
    thinking parameter", in the body ``{"model": "your-reasoning-model", "max_tokens":
    1024, "thinking": {"type": "enabled"}, "messages": [...]}``: no budget, which cuca's
    default (8192, not below 1024) would have refused. A recording server receives the
    bytes the page shows."""
    request = (
        UnifiedRequest.new("your-reasoning-model")
        .add_user_message("What is the weather in Rome?")
        .set_max_tokens(1024)
        .set_thinking(ThinkingConfig(params=AnthropicThinkingParams(without_budget=True)))
    )
    async with open_replay_server(Reply(transcript("anthropic/thinking"))) as server:
        base = f"{server.url}/v1"
        async with CucaClient(ProviderEndpoint.ANTHROPIC, base_url=base) as client:
            await client.generate(request)
        (sent,) = server.requests
    assert sent.path == "/v1/messages"
    assert sent.body == page_body()
    body = sent.json()
    assert body.pop("stream") is True
    # the seed's one user message, in the block form cuca writes for every text
    (message,) = body["messages"]
    assert message["content"] == [{"type": "text", "text": "What is the weather in Rome?"}]
    message["content"] = "What is the weather in Rome?"
    assert body == SEED_MESSAGES_REQUEST
    assert "x-api-key" not in sent.headers and "authorization" not in sent.headers


def test_seed_004_without_budget_takes_no_budget_or_effort() -> None:
    with pytest.raises(ConfigurationError, match="without_budget=True alone"):
        AnthropicThinkingParams(budget_tokens=2048, without_budget=True)
    with pytest.raises(ConfigurationError, match="without_budget=True alone"):
        AnthropicThinkingParams(effort="high", without_budget=True)
