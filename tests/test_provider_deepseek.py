"""DeepSeek's native route (the OpenAI-compatible adapter with DeepSeek's quirks) and the
choice of the Anthropic bridge by base URL."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.transcripts import Decoded, decode_chunks, transcript

from cuca import (
    ConfigurationError,
    CucaClient,
    OpenAiThinkingParams,
    PromptCacheUsage,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    TokenUsage,
    ToolCall,
    UnifiedRequest,
)
from cuca.providers.base import ClientSettings, Item
from cuca.providers.chat.deepseek import is_bridge_url, make_deepseek
from cuca.providers.chat.encode import ChatCompletionsDecoder, OpenAiCompatAdapter
from cuca.testing import Reply, chunk_sizes, chunkings, open_replay_server

KEY = "sk-deepseek-secret-42"
DEEPSEEK = ProviderEndpoint.DEEPSEEK

EXPECTED: dict[str, tuple[list[Item], TokenUsage, PromptCacheUsage, str]] = {
    "deepseek/reasoner": (
        [
            *(Thinking(t, provider=DEEPSEEK) for t in ("引导", "用户", "问候")),
            Text("你好"),
            Text("！"),
        ],
        TokenUsage(10, 128, 94),
        PromptCacheUsage(0, 0),
        "stop",
    ),
    "deepseek/tool_call": (
        [
            Thinking("Read chapter 3.", provider=DEEPSEEK),
            ToolCall("call_00_JKplDF8t8DbqkZaGChDX1881", "read_chapter", {"chapter": 3}),
        ],
        TokenUsage(1200, 30, None),
        PromptCacheUsage(1152, 0),
        "tool_calls",
    ),
}


def check(name: str, decoded: Decoded) -> None:
    items, usage, cache, finish = EXPECTED[name]
    assert decoded.error is None
    assert decoded.items == items
    assert decoded.summary.usage == usage
    assert decoded.summary.prompt_cache_usage == cache
    assert decoded.summary.finish_reason == finish


def native(base_url: str | None = None, api_key: str | None = KEY) -> Any:
    return make_deepseek(ClientSettings(ProviderEndpoint.DEEPSEEK, base_url, api_key))


def request(**changes: Any) -> UnifiedRequest:
    out = UnifiedRequest.new("deepseek-chat").add_user_message("Hi")
    for key, value in changes.items():
        out = getattr(out, f"set_{key}")(value)
    return out


# -- stream --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_deepseek_transcript_any_chunking(name: str, data: st.DataObject) -> None:
    chunks = data.draw(chunkings(transcript(name)))
    check(name, decode_chunks(ChatCompletionsDecoder("deepseek"), chunks))


@pytest.mark.parametrize("name", sorted(EXPECTED))
@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_deepseek_transcript_over_http(name: str, data: st.DataObject) -> None:
    body = transcript(name)
    sizes = data.draw(chunk_sizes(len(body), max_chunks=30))
    items: list[Item] = []
    async with open_replay_server(Reply(body=body, chunks=sizes)) as server:
        client = CucaClient(ProviderEndpoint.DEEPSEEK, base_url=server.url, api_key=KEY)
        async with client, client.generate_stream(request()) as stream:
            items = [item async for item in stream]
        (sent,) = server.requests
    expected, usage, cache, finish = EXPECTED[name]
    assert items == expected
    assert stream.response is not None
    assert stream.response.usage == usage
    assert stream.response.prompt_cache_usage == cache
    assert stream.response.finish_reason == finish
    assert sent.path == "/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"


# -- request -------------------------------------------------------------------------


def test_deepseek_default_url() -> None:
    adapter = native()
    assert isinstance(adapter, OpenAiCompatAdapter)
    assert adapter.encode(request()).url == "https://api.deepseek.com/v1/chat/completions"


@pytest.mark.parametrize(
    ("thinking", "expected"),
    [
        (ThinkingConfig.on(ThinkingEffort.MINIMAL), {"type": "enabled"}),
        (ThinkingConfig.on(ThinkingEffort.LOW), {"type": "enabled"}),
        (ThinkingConfig.on(ThinkingEffort.MEDIUM), {"type": "enabled"}),
        (ThinkingConfig.on(ThinkingEffort.HIGH), {"type": "enabled"}),
        (ThinkingConfig.on(ThinkingEffort.XHIGH), {"type": "enabled"}),
        (ThinkingConfig(True, None, OpenAiThinkingParams("high")), {"type": "enabled"}),
        (ThinkingConfig.off(), {"type": "disabled"}),
        (None, None),
    ],
)
def test_deepseek_thinking_is_a_mode_without_effort(
    thinking: ThinkingConfig | None, expected: dict[str, str] | None
) -> None:
    body = native().encode(request(thinking=thinking)).body
    assert body.get("thinking") == expected
    assert "reasoning_effort" not in body


def test_deepseek_body_field_by_field() -> None:
    body = native().encode(request(temperature=0.5, max_tokens=100)).body
    assert body == {
        "model": "deepseek-chat",
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.5,
        "max_tokens": 100,
    }


def test_deepseek_reasoning_sent_back_only_on_tool_turns() -> None:
    conversation = (
        UnifiedRequest.new("deepseek-reasoner")
        .add_user_message("Hi")
        .add_assistant_message([Thinking("greet"), Text("Hello")])
        .add_user_message("Read chapter 3")
        .add_assistant_message(
            [Thinking("Read chapter 3."), ToolCall("call_00_x", "read_chapter", {"chapter": 3})]
        )
        .add_tool_result("call_00_x", "Once upon a time")
    )
    messages = native().encode(conversation).body["messages"]
    assert messages[1] == {"role": "assistant", "content": "Hello"}
    assert messages[3]["reasoning_content"] == "Read chapter 3."
    assert messages[3]["content"] is None
    assert messages[4] == {
        "role": "tool",
        "tool_call_id": "call_00_x",
        "content": "Once upon a time",
    }


def test_deepseek_without_key_fails_before_io() -> None:
    with pytest.raises(ConfigurationError, match="requires an API key"):
        native(api_key=None).encode(request())


def test_deepseek_key_never_in_repr() -> None:
    adapter = native()
    assert KEY not in repr(adapter)
    assert KEY not in repr(adapter.encode(request()))


# -- the bridge ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bridge"),
    [
        ("https://api.deepseek.com/anthropic", True),
        ("https://api.deepseek.com/anthropic/", True),
        ("https://api.deepseek.com/anthropic/v1", True),
        ("http://127.0.0.1:5000/anthropic", True),
        ("https://api.deepseek.com", False),
        ("https://api.deepseek.com/v1", False),
        ("http://anthropic.local/v1", False),
        (None, False),
    ],
)
def test_deepseek_bridge_selected_by_base_url(url: str | None, bridge: bool) -> None:
    assert is_bridge_url(url) is bridge


def test_deepseek_bridge_url_builds_the_anthropic_adapter() -> None:
    adapter = native("https://api.deepseek.com/anthropic")
    assert type(adapter).__module__ == "cuca.providers.anthropic.encode"
    assert adapter.endpoint == ProviderEndpoint.DEEPSEEK
