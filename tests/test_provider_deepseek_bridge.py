"""DeepSeek's Anthropic-compatible bridge: the Anthropic adapter with DeepSeek's model
names, no prompt caching, an on/off thinking switch and unsigned thinking replayed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.transcripts import decode_chunks, transcript

from cuca import (
    AnthropicThinkingParams,
    ConfigurationError,
    CucaClient,
    PromptCache,
    ProviderEndpoint,
    ServerError,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    ToolCall,
    UnifiedRequest,
    merge_blocks,
)
from cuca.providers.anthropic.encode import (
    AnthropicAdapter,
    deepseek_bridge_model,
    make_deepseek_bridge,
)
from cuca.providers.base import ClientSettings
from cuca.providers.registry import adapter_for
from cuca.testing import Reply, chunkings, open_replay_server
from cuca.types import TokenUsage

DEEPSEEK = ProviderEndpoint.DEEPSEEK
BRIDGE_URL = "https://api.deepseek.com/anthropic"
SETTINGS = ClientSettings(DEEPSEEK, base_url=BRIDGE_URL, api_key="sk-deepseek")
REQUEST = UnifiedRequest.new("claude-sonnet-4-5").add_user_message("Weather in Hangzhou?")


def body(request: UnifiedRequest) -> dict[str, Any]:
    encoded: dict[str, Any] = make_deepseek_bridge(SETTINGS).encode(request).body
    return encoded


def test_deepseek_bridge_selected_by_the_registry_for_an_anthropic_base_url() -> None:
    adapter = adapter_for(SETTINGS)
    assert isinstance(adapter, AnthropicAdapter)
    assert adapter.endpoint == DEEPSEEK


@pytest.mark.parametrize(
    ("base", "url"),
    [
        (BRIDGE_URL, "https://api.deepseek.com/anthropic/v1/messages"),
        (BRIDGE_URL + "/", "https://api.deepseek.com/anthropic/v1/messages"),
        (BRIDGE_URL + "/v1", "https://api.deepseek.com/anthropic/v1/messages"),
    ],
)
def test_deepseek_bridge_url(base: str, url: str) -> None:
    settings = ClientSettings(DEEPSEEK, base_url=base, api_key="k")
    http = make_deepseek_bridge(settings).encode(REQUEST)
    assert http.url == url
    assert http.headers["x-api-key"] == "k"
    assert "authorization" not in http.headers


def test_deepseek_bridge_requires_an_api_key() -> None:
    adapter = make_deepseek_bridge(ClientSettings(DEEPSEEK, base_url=BRIDGE_URL))
    with pytest.raises(ConfigurationError) as info:
        adapter.encode(REQUEST)
    assert info.value.message == (
        "deepseek anthropic bridge requires an api key: pass api_key= or set DEEPSEEK_API_KEY"
    )


@pytest.mark.parametrize(
    ("model", "served"),
    [
        ("claude-opus-4-1", "deepseek-v4-pro"),
        ("claude-opus-4-20250514", "deepseek-v4-pro"),
        ("claude-sonnet-4-5", "deepseek-v4-flash"),
        ("claude-haiku-4-5", "deepseek-v4-flash"),
        ("deepseek-v4-pro", "deepseek-v4-pro"),
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet-latest"),
    ],
)
def test_deepseek_bridge_model_rewrite(model: str, served: str) -> None:
    assert deepseek_bridge_model(model) == served
    assert body(UnifiedRequest.new(model).add_user_message("hi"))["model"] == served


def test_deepseek_bridge_forces_prompt_caching_off() -> None:
    request = (
        REQUEST.add_system_message("system")
        .add_tool("get_weather")
        .set_prompt_cache(PromptCache.auto())
    )
    encoded = body(request)
    assert encoded["system"] == "system"
    assert "cache_control" not in str(encoded)


@pytest.mark.parametrize(
    ("thinking", "keys"),
    [
        (None, {}),
        (ThinkingConfig.off(), {"thinking": {"type": "disabled"}}),
        (ThinkingConfig.on(ThinkingEffort.HIGH), {"thinking": {"type": "enabled"}}),
        (
            ThinkingConfig(True, params=AnthropicThinkingParams(effort="high")),
            {"thinking": {"type": "enabled"}, "output_config": {"effort": "high"}},
        ),
    ],
)
def test_deepseek_bridge_thinking_is_a_mode(
    thinking: ThinkingConfig | None, keys: dict[str, Any]
) -> None:
    encoded = body(REQUEST.set_thinking(thinking))  # no budget, so max_tokens 1024 is fine
    assert {k: encoded[k] for k in ("thinking", "output_config") if k in encoded} == keys


def decode(chunks: list[bytes] | None = None) -> Any:
    decoder = make_deepseek_bridge(SETTINGS).new_decoder(REQUEST)
    return decode_chunks(decoder, chunks or [transcript("anthropic/deepseek_bridge")])


def test_deepseek_bridge_decodes_unsigned_thinking_and_tool_use() -> None:
    decoded = decode()
    assert decoded.error is None
    assert decoded.items == [
        Thinking("The user asks for the weather; ", provider=DEEPSEEK),
        Thinking("call the tool.", provider=DEEPSEEK),
        ToolCall("call_00_kQ3m8Zr2Xw9Lb4Tn7Vp1Hs6J", "get_weather", {"location": "Hangzhou"}),
    ]
    assert decoded.summary.usage == TokenUsage(64, 38, None)
    assert decoded.summary.prompt_cache_usage is None
    assert decoded.summary.provider_finish_reason == "tool_use"
    assert decoded.summary.finish_reason == "tool_calls"


@settings(max_examples=examples(50), deadline=None)
@given(data=st.data())
def test_deepseek_bridge_decoder_any_chunking(data: st.DataObject) -> None:
    chunks = data.draw(chunkings(transcript("anthropic/deepseek_bridge")))
    assert decode(chunks) == decode()


def test_deepseek_bridge_errors_name_deepseek() -> None:
    frame = (
        b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"busy"}}\n\n'
    )
    decoded = decode_chunks(make_deepseek_bridge(SETTINGS).new_decoder(REQUEST), [frame])
    data = frame[len(b"event: error\ndata: ") : -2].decode()
    assert decoded.error == ServerError(500, data, "api_error: busy")  # "api_error"
    assert isinstance(decoded.error, ServerError) and decoded.error.provider == "deepseek"


def test_deepseek_bridge_replays_unsigned_deepseek_thinking_only() -> None:
    turn = merge_blocks(decode().items)
    request = REQUEST.add_assistant_message(
        [Thinking("anthropic's", "sig", ProviderEndpoint.ANTHROPIC), *turn]
    ).add_tool_result("call_00_kQ3m8Zr2Xw9Lb4Tn7Vp1Hs6J", "22C")
    assistant = body(request)["messages"][1]
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "The user asks for the weather; call the tool."},
        {
            "type": "tool_use",
            "id": "call_00_kQ3m8Zr2Xw9Lb4Tn7Vp1Hs6J",
            "name": "get_weather",
            "input": {"location": "Hangzhou"},
        },
    ]


def test_deepseek_bridge_replays_a_signature_when_deepseek_sent_one() -> None:
    request = REQUEST.add_assistant_message(
        [Thinking("a", provider=DEEPSEEK), Thinking("", "ds-sig", DEEPSEEK), Text("b")]
    )
    content = body(request)["messages"][1]["content"]
    assert content[0] == {"type": "thinking", "thinking": "a", "signature": "ds-sig"}


async def test_deepseek_bridge_over_http() -> None:
    async with open_replay_server(Reply(transcript("anthropic/deepseek_bridge"))) as server:
        base = f"{server.url}/anthropic"
        async with CucaClient(DEEPSEEK, base_url=base, api_key="sk-deepseek") as client:
            done = await client.generate(REQUEST.set_thinking(True))
        sent = server.requests[0]
    assert sent.path == "/anthropic/v1/messages"
    assert sent.headers["x-api-key"] == "sk-deepseek"
    assert sent.json()["model"] == "deepseek-v4-flash"
    assert sent.json()["thinking"] == {"type": "enabled"}
    assert done.blocks[0] == Thinking(
        "The user asks for the weather; call the tool.", provider=DEEPSEEK
    )
    assert done.response.provider == DEEPSEEK
