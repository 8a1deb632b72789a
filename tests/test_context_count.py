"""count_tokens and model_info for the cloud vendors, over loopback or with no I/O.

The counting routes' answers are written from the vendors' API references:
Anthropic's ``POST /v1/messages/count_tokens`` answers ``{"input_tokens": N}``;
Gemini's ``models/{model}:countTokens`` answers ``{"totalTokens": N, ...}``. What cuca
sends is checked against what a turn would send for the same request.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from cuca import (
    ConfigurationError,
    ContextOverflowError,
    CucaClient,
    LlamaCppConfig,
    LlamaRoute,
    ProviderEndpoint,
    ToolDefinition,
    UnifiedRequest,
)
from cuca.providers.chat import estimate as token_estimate
from cuca.providers.chat.estimate import (
    ENCODING_SHA256,
    count_text,
    encoding_for,
    estimate_body,
)
from cuca.testing import Reply, open_replay_server

JSON = [("content-type", "application/json")]
WEATHER = ToolDefinition(
    "get_weather",
    "The weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
REQUEST = (
    UnifiedRequest.new("claude-sonnet-4-5")
    .add_system_message("You are terse.")
    .add_user_message("Weather in Paris?")
    .add_tool(WEATHER)
    .set_max_tokens(256)
)

# OpenAI's cookbook ("How to count tokens with tiktoken"): these messages cost 129
# prompt tokens on gpt-4-0613 and 124 on gpt-4o, as the API itself reported.
COOKBOOK = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates "
        "corporate jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on "
        "opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the "
        "client deliverable.",
    },
]


def answer(body: Any) -> Reply:
    return Reply(json.dumps(body).encode(), headers=JSON)


async def test_count_anthropic_posts_the_turns_body_to_count_tokens() -> None:
    async with open_replay_server(answer({"input_tokens": 412})) as server:
        async with CucaClient(ProviderEndpoint.ANTHROPIC, base_url=server.url, api_key="k") as c:
            counted = await c.count_tokens(REQUEST)
            turn_body = c.adapter().encode(REQUEST).body
    assert (counted.tokens, counted.exact, counted.method) == (412, True, "anthropic count_tokens")
    (sent,) = server.requests
    assert sent.path == "/messages/count_tokens"
    assert sent.headers["x-api-key"] == "k"
    body = sent.json()
    assert "max_tokens" not in body and "stream" not in body  # the route refuses them
    for field in ("model", "system", "messages", "tools"):
        assert body[field] == turn_body[field]


async def test_count_gemini_wraps_the_turns_body_in_generate_content_request() -> None:
    request = UnifiedRequest.new("gemini-2.5-flash").add_system_message("Be terse.")
    request = request.add_user_message("Weather in Paris?").add_tool(WEATHER)
    reply = answer(
        {"totalTokens": 31, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 31}]}
    )
    async with open_replay_server(reply) as server:
        async with CucaClient(
            ProviderEndpoint.GOOGLE_GEMINI, base_url=server.url, api_key="g"
        ) as c:
            counted = await c.count_tokens(request)
            turn_body = c.adapter().encode(request).body
    assert (counted.tokens, counted.exact, counted.method) == (31, True, "gemini countTokens")
    (sent,) = server.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash:countTokens"
    inner = sent.json()["generateContentRequest"]
    assert inner == {"model": "models/gemini-2.5-flash", **turn_body}
    assert "systemInstruction" in inner and "tools" in inner


async def test_count_refused_by_the_vendor_raises_its_status_error() -> None:
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 9 tokens > 8 maximum",
        },
    }
    reply = Reply(json.dumps(body).encode(), status=400, headers=JSON)
    async with open_replay_server(reply) as server:
        async with CucaClient(ProviderEndpoint.ANTHROPIC, base_url=server.url, api_key="k") as c:
            with pytest.raises(ContextOverflowError) as info:
                await c.count_tokens(REQUEST)
    assert (info.value.limit, info.value.requested) == (8, 9)


def test_estimate_matches_the_cookbooks_api_counts() -> None:
    assert estimate_body({"messages": COOKBOOK}, "gpt-4-0613") == (129, "cl100k_base")
    assert estimate_body({"messages": COOKBOOK}, "gpt-4o") == (124, "o200k_base")


def test_estimate_counts_enums_and_nested_schemas() -> None:
    def tool(parameters: dict[str, Any]) -> dict[str, Any]:
        function = {"name": "f", "description": "Do it.", "parameters": parameters}
        return {"type": "function", "function": function}

    flat = {"type": "object", "properties": {"u": {"type": "string"}}}
    enum = {"type": "object", "properties": {"u": {"type": "string", "enum": ["c", "f"]}}}
    nested = {
        "type": "object",
        "properties": {"u": {"type": "object", "properties": {"deep": {"type": "string"}}}},
    }
    base, _ = estimate_body({"messages": [], "tools": [tool(flat)]}, "gpt-4o")
    with_enum, _ = estimate_body({"messages": [], "tools": [tool(enum)]}, "gpt-4o")
    deeper, _ = estimate_body({"messages": [], "tools": [tool(nested)]}, "gpt-4o")
    assert with_enum == base + token_estimate.ENUM_INIT + 2 * (token_estimate.ENUM_ITEM + 1)
    assert deeper > base + 5  # the nested schema's JSON counts


def test_estimate_encoding_by_model() -> None:
    assert encoding_for("gpt-4o-mini") == "o200k_base"
    assert encoding_for("gpt-4.1") == "o200k_base"
    assert encoding_for("gpt-5") == "o200k_base"
    assert encoding_for("gpt-4-turbo") == "cl100k_base"
    assert encoding_for("gpt-3.5-turbo") == "cl100k_base"
    assert encoding_for("deepseek-chat") == "o200k_base"  # an estimate either way


async def test_count_openai_is_an_estimate_with_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("count_tokens touched the network")

    token_estimate._encoding.cache_clear()  # the encoding is loaded under the ban
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    request = UnifiedRequest.new("gpt-4o").add_user_message("Weather in Paris?")
    async with CucaClient(ProviderEndpoint.OPENAI, api_key="sk-test") as client:
        plain = await client.count_tokens(request)
        tooled = await client.count_tokens(request.add_tool(WEATHER))
    assert (plain.exact, plain.method) == (False, "tiktoken o200k_base")
    text = count_text("user", "o200k_base") + count_text("Weather in Paris?", "o200k_base")
    assert plain.tokens == 3 + 3 + text  # reply priming, the message's overhead, its strings
    tool = (
        token_estimate.FUNC_INIT
        + count_text("get_weather:The weather in a city", "o200k_base")
        + token_estimate.PROP_INIT
        + token_estimate.PROP_KEY
        + count_text("city:string:", "o200k_base")
        + token_estimate.FUNC_END
    )
    assert tooled.tokens == plain.tokens + tool  # the cookbook's recipe for functions


def test_estimate_refuses_an_encoding_file_that_is_not_tiktokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token_estimate._encoding.cache_clear()
    monkeypatch.setitem(ENCODING_SHA256, "cl100k_base", "0" * 64)
    try:
        with pytest.raises(ConfigurationError, match="refusing to count with it"):
            estimate_body({"messages": COOKBOOK}, "gpt-4")
    finally:
        token_estimate._encoding.cache_clear()


async def test_count_llama_completion_route_cannot_count() -> None:
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    client = CucaClient(
        ProviderEndpoint.LLAMA_CPP, base_url="http://127.0.0.1:9", provider_config=config
    )
    async with client:
        with pytest.raises(ConfigurationError, match="llama_cpp has no way to count tokens"):
            await client.count_tokens(REQUEST)


@pytest.mark.parametrize(
    ("provider", "model", "window"),
    [
        (ProviderEndpoint.OPENAI, "gpt-4o-mini", 128000),
        (ProviderEndpoint.ANTHROPIC, "claude-sonnet-4-5", 200000),
    ],
)
async def test_model_info_cloud_comes_from_genai_prices(
    provider: ProviderEndpoint, model: str, window: int
) -> None:
    async with CucaClient(provider, api_key="k") as client:
        info = await client.model_info(model)
    assert (info.model, info.context_window, info.source) == (model, window, "genai-prices")
    assert info.max_output_tokens is None  # genai-prices keeps no output limit


async def test_model_info_unknown_model_has_none_figures() -> None:
    async with CucaClient(ProviderEndpoint.OPENAI, api_key="k") as client:
        info = await client.model_info("no-such-model-xyz")
    assert (info.context_window, info.source) == (None, "")
    async with CucaClient(ProviderEndpoint.VLLM, base_url="http://127.0.0.1:9") as client:
        info = await client.model_info("my-finetune")
    assert info.context_window is None  # a self-hosted server's window is its own
