"""The Anthropic Messages adapter: request bodies, the event-stream decoder (byte by byte,
under any chunking, against the official SDK's accumulator) and whole turns over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.transcripts import decode_chunks, in_stream, transcript

from cuca import (
    AnthropicThinkingParams,
    ConfigurationError,
    CucaClient,
    FinishReason,
    HttpStatusError,
    ImageBase64,
    MessageRole,
    PromptCache,
    ProviderEndpoint,
    ProviderError,
    ServerError,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    ToolCall,
    ToolCallError,
    TransportError,
    UnifiedMessage,
    UnifiedRequest,
    merge_blocks,
)
from cuca.providers.anthropic.encode import AnthropicConfig, make_anthropic
from cuca.providers.base import ClientSettings
from cuca.testing import Reply, chunk_sizes, chunkings, open_replay_server
from cuca.types import PromptCacheUsage, TokenUsage

ANTHROPIC = ProviderEndpoint.ANTHROPIC
GEMINI = ProviderEndpoint.GOOGLE_GEMINI
SETTINGS = ClientSettings(ANTHROPIC, api_key="sk-ant-test")
REQUEST = UnifiedRequest.new("claude-sonnet-4-20250514").add_user_message("Weather in Paris?")
TRANSCRIPTS = [
    "text",
    "tool_use",
    "thinking",
    "redacted_thinking",
    "thinking_two_tools",
    "error",
    "cache_usage",
    "malformed_tool",
    "cut",
]
COMPLETE = [n for n in TRANSCRIPTS if n not in ("error", "cut")]
SIG = "c3ludGhldGljLXNpZ25hdHVyZS1maXh0dXJlLWEtbm90LWEtcmVhbC1zaWduYXR1cmU="


def body(request: UnifiedRequest, settings: ClientSettings = SETTINGS) -> dict[str, Any]:
    encoded: dict[str, Any] = make_anthropic(settings).encode(request).body
    return encoded


def decode(name: str, chunks: list[bytes] | None = None) -> Any:
    decoder = make_anthropic(SETTINGS).new_decoder(REQUEST)
    data = transcript(f"anthropic/{name}")
    return decode_chunks(decoder, chunks if chunks is not None else [data])


# -- request -------------------------------------------------------------------------


def test_anthropic_encode_url_and_headers() -> None:
    http = make_anthropic(SETTINGS).encode(REQUEST)
    assert http.url == "https://api.anthropic.com/v1/messages"
    assert http.headers["x-api-key"] == "sk-ant-test"
    assert http.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in http.headers
    assert "sk-ant-test" not in repr(http)


def test_anthropic_encode_base_url_trailing_slash() -> None:
    settings = ClientSettings(ANTHROPIC, base_url="http://127.0.0.1:9/v1/", api_key="k")
    assert make_anthropic(settings).encode(REQUEST).url == "http://127.0.0.1:9/v1/messages"


def test_anthropic_encode_bearer_token_replaces_api_key() -> None:
    config = AnthropicConfig(
        bearer_token="oauth-secret", betas=("interleaved-thinking-2025-05-14",)
    )
    settings = ClientSettings(ANTHROPIC, api_key="sk-ant-test", provider_config=config)
    headers = make_anthropic(settings).encode(REQUEST).headers
    assert headers["authorization"] == "Bearer oauth-secret"
    assert "x-api-key" not in headers
    assert headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert "oauth-secret" not in repr(config)


def test_anthropic_encode_bearer_token_alone_is_enough() -> None:
    config = AnthropicConfig(bearer_token="oauth-secret")
    settings = ClientSettings(ANTHROPIC, provider_config=config)
    assert make_anthropic(settings).encode(REQUEST).headers["authorization"].startswith("Bearer")


def test_anthropic_encode_missing_key_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as info:
        make_anthropic(ClientSettings(ANTHROPIC)).encode(REQUEST)
    assert str(info.value) == (
        "configuration error: anthropic requires an api key: "
        "pass api_key= or set ANTHROPIC_API_KEY"
    )


def test_anthropic_encode_minimal_body() -> None:
    assert body(REQUEST.add_system_message("Be brief.")) == {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 1024,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}],
        "stream": True,
    }


def test_anthropic_encode_temperature_and_max_tokens_when_set() -> None:
    encoded = body(REQUEST.set_temperature(0.2).set_max_tokens(4096))
    assert (encoded["temperature"], encoded["max_tokens"]) == (0.2, 4096)


def test_anthropic_encode_conversation_with_tools() -> None:
    request = (
        UnifiedRequest.new("claude-sonnet-4-20250514")
        .add_user_message([Text("What is this?"), ImageBase64("image/png", "iVBORw0KGgo=")])
        .add_assistant_message(
            [
                Text("I'll check."),
                ToolCall("toolu_1", "get_weather", {"location": "Paris"}),
                ToolCall("toolu_2", "get_time", {}),
            ]
        )
        .add_tool_result("toolu_1", "18C")
        .add_tool_result("toolu_2", "timeout", is_error=True)
        .add_user_message("Thanks")
        .add_tool("get_weather", "Current weather", {"type": "object"})
    )
    encoded = body(request)
    assert encoded["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll check."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"location": "Paris"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "18C",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "timeout",
                    "is_error": True,
                },
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]
    assert encoded["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather",
            "input_schema": {"type": "object"},
        }
    ]


def test_anthropic_encode_plain_tool_message_answers_its_call() -> None:
    message = UnifiedMessage(MessageRole.TOOL, "18C", tool_call_id="toolu_1")
    encoded = body(REQUEST.add_message(message))
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C", "is_error": False}
    assert encoded["messages"][-1] == {"role": "user", "content": [result]}


def test_anthropic_encode_skips_empty_text_blocks() -> None:
    request = REQUEST.add_assistant_message([Text(""), ToolCall("toolu_1", "f", {})])
    assert [b["type"] for b in body(request)["messages"][-1]["content"]] == ["tool_use"]


@pytest.mark.parametrize(
    ("effort", "budget"),
    [
        (ThinkingEffort.MINIMAL, 1024),
        (ThinkingEffort.LOW, 2048),
        (ThinkingEffort.MEDIUM, 8192),
        (ThinkingEffort.HIGH, 16384),
        (ThinkingEffort.XHIGH, 16384),
        (None, 8192),
    ],
)
def test_anthropic_encode_thinking_budget_table(effort: ThinkingEffort | None, budget: int) -> None:
    request = REQUEST.set_max_tokens(32000).set_thinking(ThinkingConfig(True, effort))
    encoded = body(request)
    assert encoded["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert "output_config" not in encoded


def test_anthropic_encode_thinking_budget_must_be_below_a_set_max_tokens() -> None:
    with pytest.raises(ConfigurationError, match=r"budget_tokens \(2048\).*max_tokens \(1024\)"):
        body(REQUEST.set_thinking(ThinkingEffort.LOW).set_max_tokens(1024))
    with pytest.raises(ConfigurationError):
        body(REQUEST.set_thinking(ThinkingEffort.LOW).set_max_tokens(2048))
    assert body(REQUEST.set_thinking(ThinkingEffort.LOW).set_max_tokens(2049))["thinking"]


@pytest.mark.parametrize(
    ("effort", "wire"),
    [
        ("minimal", "low"),
        ("low", "low"),
        ("medium", "medium"),
        ("high", "high"),
        ("xhigh", "xhigh"),
        ("max", "max"),
    ],
)
def test_anthropic_encode_adaptive_effort(effort: str, wire: str) -> None:
    thinking = ThinkingConfig(True, params=AnthropicThinkingParams(effort=effort))
    encoded = body(REQUEST.set_thinking(thinking))
    assert encoded["thinking"] == {"type": "adaptive"}
    assert encoded["output_config"] == {"effort": wire}


def test_anthropic_encode_budget_override_wins_over_effort() -> None:
    params = AnthropicThinkingParams(budget_tokens=3000)
    thinking = ThinkingConfig(True, ThinkingEffort.HIGH, params)
    encoded = body(REQUEST.set_thinking(thinking).set_max_tokens(5000))
    assert encoded["thinking"] == {"type": "enabled", "budget_tokens": 3000}


@pytest.mark.parametrize("thinking", [None, ThinkingConfig.off()])
def test_anthropic_encode_thinking_off_sends_no_key(thinking: ThinkingConfig | None) -> None:
    encoded = body(REQUEST.set_thinking(thinking))
    assert "thinking" not in encoded
    assert "output_config" not in encoded


def test_anthropic_encode_prompt_cache_breakpoints() -> None:
    request = (
        UnifiedRequest.new("claude-sonnet-4-20250514")
        .add_system_message("Long system prompt")
        .add_user_message([Text("a"), Text("b")])
        .add_assistant_message([ToolCall("toolu_1", "f", {}), ToolCall("toolu_2", "f", {})])
        .add_tool_result("toolu_1", "one")
        .add_tool_result("toolu_2", "two")
        .add_tool("f", "first", {"type": "object"})
        .add_tool("g", "second", {"type": "object"})
        .set_prompt_cache(PromptCache(system=True, tools=True, messages=(1, -2, 99)))
    )
    encoded = body(request)
    ephemeral = {"type": "ephemeral"}
    assert encoded["system"] == [
        {"type": "text", "text": "Long system prompt", "cache_control": ephemeral}
    ]
    assert "cache_control" not in encoded["tools"][0]
    assert encoded["tools"][1]["cache_control"] == ephemeral
    user, assistant, results = encoded["messages"]
    assert [("cache_control" in b) for b in user["content"]] == [False, True]
    assert all("cache_control" not in b for b in assistant["content"])
    # -2 is the first of the two tool messages, merged into one user turn
    assert [("cache_control" in b) for b in results["content"]] == [True, False]


def test_anthropic_encode_no_prompt_cache_no_marks() -> None:
    request = REQUEST.add_system_message("s").add_tool("f")
    assert "cache_control" not in json.dumps(body(request))


def test_anthropic_encode_replays_own_signed_thinking_before_tool_use() -> None:
    request = REQUEST.add_assistant_message(
        [
            Thinking("gemini thoughts", "gsig", GEMINI),
            Thinking("unsigned and foreign"),
            Thinking("Let me ", provider=ANTHROPIC),
            Thinking("check.", provider=ANTHROPIC),
            Thinking("", signature="sig-1", provider=ANTHROPIC),
            Thinking("", signature="ZGF0YQ==", provider=ANTHROPIC, redacted=True),
            Text("Checking."),
            ToolCall("toolu_1", "get_weather", {"location": "Paris"}),
        ]
    ).add_tool_result("toolu_1", "18C")
    assistant = body(request)["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Let me check.", "signature": "sig-1"},
            {"type": "redacted_thinking", "data": "ZGF0YQ=="},
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"location": "Paris"},
            },
        ],
    }


def test_anthropic_encode_drops_unsigned_anthropic_thinking() -> None:
    request = REQUEST.add_assistant_message([Thinking("orphan", provider=ANTHROPIC), Text("hi")])
    assert body(request)["messages"][1]["content"] == [{"type": "text", "text": "hi"}]


def test_anthropic_error_message_extracts_error_message() -> None:
    adapter = make_anthropic(SETTINGS)
    raw = json.dumps(
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "max_tokens: too large"},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
        }
    )
    assert adapter.error_message(400, raw) == "max_tokens: too large"
    assert adapter.error_message(502, "<html>Bad gateway</html>") is None
    assert adapter.error_message(500, '{"error": "flat"}') is None


# -- decoding ------------------------------------------------------------------------


def test_anthropic_decoder_text() -> None:
    decoded = decode("text")
    assert decoded.error is None
    assert decoded.items == [Text("Hello"), Text(", wörld! ☀")]
    assert decoded.summary.usage == TokenUsage(25, 15, None)
    assert decoded.summary.provider_finish_reason == "end_turn"
    assert decoded.summary.finish_reason is FinishReason.STOP


def test_anthropic_decoder_recorded_tool_use() -> None:
    decoded = decode("tool_use")
    assert decoded.items == [
        Text("I"),
        Text("'ll check the current weather in Paris for you."),
        ToolCall("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", {"location": "Paris"}),
    ]
    assert decoded.summary.usage == TokenUsage(377, 65, None)
    assert decoded.summary.provider_finish_reason == "tool_use"
    assert decoded.summary.finish_reason is FinishReason.TOOL_CALLS


def test_anthropic_decoder_thinking_text_streams_and_signature_closes_the_block() -> None:
    decoded = decode("thinking")
    assert decoded.items[:3] == [
        Thinking("Simple educ", provider=ANTHROPIC),
        Thinking("ational question about why the sky is blue.", provider=ANTHROPIC),
        Thinking("", signature=SIG, provider=ANTHROPIC),
    ]
    merged = merge_blocks(decoded.items)
    assert merged == (
        Thinking("Simple educational question about why the sky is blue.", SIG, ANTHROPIC),
        Text("Rayleigh scattering: short wavelengths scatter more."),
    )


def test_anthropic_decoder_redacted_thinking_stays_opaque() -> None:
    decoded = decode("redacted_thinking")
    redacted = decoded.items[0]
    assert isinstance(redacted, Thinking)
    assert redacted.redacted and redacted.text == "" and redacted.provider == ANTHROPIC
    assert redacted.signature is not None and redacted.signature.startswith("EmwKAhgB")
    merged = merge_blocks(decoded.items)
    assert [type(b).__name__ for b in merged] == ["Thinking", "Thinking", "Text"]


def test_anthropic_decoder_two_fragmented_tool_uses() -> None:
    decoded = decode("thinking_two_tools")
    calls = [i for i in decoded.items if isinstance(i, ToolCall)]
    assert calls == [
        ToolCall(
            "toolu_01A09q90qw90lq917835lq9", "get_weather", {"location": "Paris", "unit": "c"}
        ),
        ToolCall(
            "toolu_01B7xR2k5nV8mQ3pL6sT9wYz", "get_weather", {"location": "Tōkyō", "days": [1, 2]}
        ),
    ]


def test_anthropic_decoder_error_event_ends_the_turn() -> None:
    decoded = decode("error")
    assert decoded.items == [Text("Partial answer")]
    # overloaded_error is the kind of a 529: a ServerError, as the status would have been
    assert decoded.error == in_stream("anthropic/error", 529, "overloaded_error: Overloaded")
    assert isinstance(decoded.error, ServerError)


def test_anthropic_decoder_error_event_without_json() -> None:
    decoder = make_anthropic(SETTINGS).new_decoder(REQUEST)
    decoded = decode_chunks(decoder, [b"event: error\ndata: upstream connect error\n\n"])
    assert decoded.error == ProviderError("anthropic", "upstream connect error")


def test_anthropic_decoder_cache_usage_is_part_of_the_prompt() -> None:
    summary = decode("cache_usage").summary
    # message_delta's cumulative values overwrite message_start's
    assert summary.usage == TokenUsage(prompt_tokens=22 + 1843 + 190, completion_tokens=9)
    assert summary.prompt_cache_usage == PromptCacheUsage(read_tokens=1843, write_tokens=190)


def test_anthropic_decoder_malformed_tool_call_is_an_item() -> None:
    decoded = decode("malformed_tool")
    assert decoded.error is None
    assert decoded.items == [
        ToolCallError(
            "anthropic",
            'malformed tool call: ["Paris"]',
            tool_call_id="toolu_01BadInput",
            name="get_weather",
            raw='["Paris"]',
        ),
        ToolCall("toolu_01NoInput", "get_time", {}),
    ]


def test_anthropic_decoder_eof_before_message_stop_is_a_transport_error() -> None:
    decoded = decode("cut")
    assert decoded.items == [Text("Half a sen")]
    assert isinstance(decoded.error, TransportError)


def test_anthropic_decoder_stops_reading_at_message_stop() -> None:
    late = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "late"},
    }
    data = transcript("anthropic/text") + f"data: {json.dumps(late)}\n\n".encode()
    decoded = decode_chunks(make_anthropic(SETTINGS).new_decoder(REQUEST), [data])
    assert Text("late") not in decoded.items


def test_anthropic_decoder_non_json_frame_is_a_json_error() -> None:
    from cuca import JsonError

    decoded = decode_chunks(make_anthropic(SETTINGS).new_decoder(REQUEST), [b"data: {oops\n\n"])
    assert isinstance(decoded.error, JsonError)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(TRANSCRIPTS))
def test_anthropic_decoder_any_chunking_gives_the_same_turn(data: st.DataObject, name: str) -> None:
    whole = decode(name)
    chunks = data.draw(chunkings(transcript(f"anthropic/{name}")))
    assert decode(name, chunks) == whole


# -- the official SDK's accumulator agrees --------------------------------------------


def sdk_message(name: str) -> Any:
    from anthropic.lib.streaming._messages import accumulate_event

    from cuca.stages.sse import SseParser

    snapshot = None
    json_bufs: dict[int, bytes] = {}
    for event in SseParser().feed(transcript(f"anthropic/{name}")):
        if event.event == "ping":
            continue
        snapshot = accumulate_event(
            event=json.loads(event.data), current_snapshot=snapshot, json_bufs=json_bufs
        )
    return snapshot


@pytest.mark.parametrize(
    "name", [*(n for n in COMPLETE if n != "malformed_tool"), "deepseek_bridge"]
)
def test_anthropic_decoder_matches_the_sdk_accumulator(name: str) -> None:
    message = sdk_message(name)
    decoded = decode(name)
    blocks = merge_blocks([i for i in decoded.items if not isinstance(i, ProviderError)])
    sdk_text = "".join(b.text for b in message.content if b.type == "text")
    assert "".join(b.text for b in blocks if isinstance(b, Text)) == sdk_text
    sdk_thinking = [(b.thinking, b.signature) for b in message.content if b.type == "thinking"]
    ours = [(b.text, b.signature) for b in blocks if isinstance(b, Thinking) and not b.redacted]
    assert ours == sdk_thinking
    sdk_redacted = [b.data for b in message.content if b.type == "redacted_thinking"]
    assert [b.signature for b in blocks if isinstance(b, Thinking) and b.redacted] == sdk_redacted
    sdk_calls = [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]
    assert [
        (c.id, c.name, dict(c.arguments)) for c in blocks if isinstance(c, ToolCall)
    ] == sdk_calls
    usage = message.usage
    cached = (usage.cache_read_input_tokens, usage.cache_creation_input_tokens)
    read, write = (n or 0 for n in cached)
    assert decoded.summary.usage == TokenUsage(
        usage.input_tokens + read + write, usage.output_tokens, None
    )
    has_cache = cached != (None, None)
    assert decoded.summary.prompt_cache_usage == (
        PromptCacheUsage(read, write) if has_cache else None
    )
    assert decoded.summary.provider_finish_reason == message.stop_reason


# -- over HTTP -------------------------------------------------------------------------


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(COMPLETE))
async def test_anthropic_over_http_at_random_chunk_boundaries(
    data: st.DataObject, name: str
) -> None:
    raw = transcript(f"anthropic/{name}")
    sizes = data.draw(chunk_sizes(len(raw), max_chunks=40))
    async with open_replay_server(Reply(raw, chunks=sizes)) as server:
        async with CucaClient(ANTHROPIC, base_url=server.url, api_key="sk-ant-test") as client:
            async with client.generate_stream(REQUEST) as stream:
                items = [item async for item in stream]
        sent = server.requests[0]
    expected = decode(name)
    assert items == expected.items
    assert stream.response is not None
    assert stream.response.usage == expected.summary.usage
    assert stream.response.prompt_cache_usage == expected.summary.prompt_cache_usage
    assert stream.response.finish_reason == expected.summary.finish_reason
    assert sent.path == "/messages"
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.json()["stream"] is True


async def test_anthropic_over_http_error_event_is_raised() -> None:
    async with open_replay_server(Reply(transcript("anthropic/error"))) as server:
        async with CucaClient(ANTHROPIC, base_url=server.url, api_key="k") as client:
            items: list[Any] = []
            with pytest.raises(ServerError, match="overloaded_error: Overloaded") as info:
                async with client.generate_stream(REQUEST) as stream:
                    async for item in stream:
                        items.append(item)
    assert items == [Text("Partial answer")]
    assert info.value.status == 529 and info.value.provider == "anthropic"
    assert str(info.value) == (
        "http status 529 (in the anthropic stream): overloaded_error: Overloaded"
    )


async def test_anthropic_over_http_status_error_carries_the_message() -> None:
    error = {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    reply = Reply(
        json.dumps(error).encode(), status=401, headers=[("content-type", "application/json")]
    )
    async with open_replay_server(reply) as server:
        async with CucaClient(ANTHROPIC, base_url=server.url, api_key="k") as client:
            with pytest.raises(HttpStatusError) as info:
                await client.generate(REQUEST)
    assert info.value.status == 401
    assert info.value.message == "invalid x-api-key"


async def test_anthropic_over_http_cut_stream_is_a_transport_error() -> None:
    async with open_replay_server(Reply(transcript("anthropic/cut"))) as server:
        async with CucaClient(ANTHROPIC, base_url=server.url, api_key="k") as client:
            with pytest.raises(TransportError):
                await client.generate(REQUEST)


async def test_anthropic_over_http_generate_collects_whole_blocks() -> None:
    async with open_replay_server(Reply(transcript("anthropic/thinking_two_tools"))) as server:
        async with CucaClient(ANTHROPIC, base_url=server.url, api_key="k") as client:
            done = await client.generate(REQUEST)
    thinking, text, first, second = done.blocks
    assert thinking == Thinking(
        "The user wants weather in two cities. I will call get_weather twice.",
        "EqQBCgIYAhIMsigTwoToolsAbCdEfGh+/==",
        ANTHROPIC,
    )
    assert text == Text("Checking both.")
    assert isinstance(first, ToolCall) and isinstance(second, ToolCall)
    assert done.response.usage == TokenUsage(512, 143, None)
