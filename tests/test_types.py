"""The unified types: fluent helpers, validation and the JSON round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cuca
from cuca import (
    AnthropicThinkingParams,
    Block,
    ConfigurationError,
    CucaClient,
    GeminiThinkingParams,
    ImageBase64,
    MessageRole,
    OpenAiThinkingParams,
    PromptCache,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
    from_json,
    to_json,
)

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
endpoints = st.sampled_from(
    [ProviderEndpoint(kind) for kind in ProviderEndpoint.BUILTIN]
) | st.text(max_size=6).map(ProviderEndpoint.custom)
opt_text = st.none() | st.text(max_size=10)

blocks: st.SearchStrategy[Block] = st.one_of(
    st.builds(Text, st.text(), opt_text, st.none() | endpoints),
    st.builds(ImageBase64, st.text(max_size=10), st.text(max_size=20)),
    st.builds(Thinking, st.text(), opt_text, st.none() | endpoints, st.booleans()),
    st.builds(ToolCall, st.text(max_size=10), st.text(max_size=10), json_objects, opt_text),
    st.builds(ToolResult, st.text(max_size=10), st.text(), st.booleans()),
)
messages = st.builds(
    UnifiedMessage,
    st.sampled_from(list(MessageRole)),
    st.lists(blocks, max_size=4).map(tuple),
    opt_text,
    opt_text,
)
params = st.none() | st.one_of(
    st.builds(AnthropicThinkingParams, st.none() | st.integers(0, 10**6), opt_text),
    st.builds(GeminiThinkingParams, st.integers(0, 10**6), st.none()),
    st.builds(GeminiThinkingParams, st.none(), opt_text),
    st.builds(OpenAiThinkingParams, st.text(max_size=8)),
)
thinking = st.none() | st.builds(
    ThinkingConfig, st.booleans(), st.none() | st.sampled_from(list(ThinkingEffort)), params
)
requests = st.builds(
    UnifiedRequest,
    model=st.text(max_size=10),
    provider=endpoints,
    messages=st.lists(messages, max_size=4).map(tuple),
    temperature=st.none() | st.floats(0, 2),
    max_tokens=st.none() | st.integers(1, 10**6),
    stream=st.booleans(),
    thinking=thinking,
    tools=st.lists(
        st.builds(ToolDefinition, st.text(max_size=8), st.text(max_size=8), json_objects),
        max_size=2,
    ).map(tuple),
    prompt_cache=st.none()
    | st.builds(
        PromptCache, st.booleans(), st.booleans(), st.lists(st.integers(-3, 3), max_size=3)
    ),
)
controls = st.builds(
    UnifiedRequest,
    model=st.just("m"),
    stop=st.lists(st.text(min_size=1, max_size=5), max_size=3),
    seed=st.none() | st.integers(0, 2**31 - 1),
    top_p=st.none() | st.floats(0, 1),
    tool_choice=st.none()
    | st.sampled_from([ToolChoice.AUTO, ToolChoice.NONE, ToolChoice.REQUIRED])
    | st.text(min_size=1, max_size=8).map(ToolChoice.tool),
)


def roundtrip(value: Any, cls: Any) -> Any:
    text = to_json(value)
    json.loads(text)  # plain JSON, nothing exotic
    return from_json(text, cls)


@given(requests)
def test_types_request_survives_json(request: UnifiedRequest) -> None:
    assert roundtrip(request, UnifiedRequest) == request


@given(controls)
def test_types_request_stop_seed_top_p_and_tool_choice_survive_json(
    request: UnifiedRequest,
) -> None:
    assert roundtrip(request, UnifiedRequest) == request


@given(messages)
def test_types_message_survives_json(message: UnifiedMessage) -> None:
    assert roundtrip(message, UnifiedMessage) == message


@given(blocks)
def test_types_block_survives_json(block: Block) -> None:
    assert roundtrip(block, Block) == block


def test_types_blocks_are_adjacently_tagged() -> None:
    assert json.loads(to_json(Text("hi"))) == {"type": "Text", "value": "hi"}
    assert json.loads(to_json(ToolResult("c1", "out"))) == {
        "type": "ToolResult",
        "value": {"tool_call_id": "c1", "output": "out", "is_error": False},
    }


def test_types_unknown_block_type_is_rejected() -> None:
    with pytest.raises(Exception, match="unknown block type"):
        from_json('{"type": "Video", "value": {}}', Block)


def test_types_fluent_helpers_return_new_requests() -> None:
    base = UnifiedRequest.new("m")
    assert base.provider == ProviderEndpoint.custom("")
    request = (
        base.add_system_message("be brief")
        .add_user_message("hi")
        .add_assistant_message([Thinking("hmm"), ToolCall("c1", "f", {"x": 1})])
        .add_tool_result("c1", "42", name="f")
        .set_max_tokens(64)
        .set_temperature(0.5)
        .set_thinking(ThinkingEffort.HIGH)
        .add_tool("f", "a function", {"type": "object"})
    )
    assert base.messages == ()
    assert [m.role for m in request.messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
    ]
    tool_msg = request.messages[3]
    assert tool_msg.tool_call_id == "c1" and tool_msg.name == "f"
    assert tool_msg.content == (ToolResult("c1", "42"),)
    assert request.max_tokens == 64 and request.temperature == 0.5
    assert request.thinking == ThinkingConfig(True, ThinkingEffort.HIGH)
    assert request.tools == (ToolDefinition("f", "a function", {"type": "object"}),)
    assert request.set_thinking(False).thinking == ThinkingConfig(enabled=False)


def test_types_gemini_params_refuse_budget_and_level_together() -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        GeminiThinkingParams(thinking_budget=10, thinking_level="LOW")


def test_types_provider_endpoint_names() -> None:
    assert repr(ProviderEndpoint.OPENAI) == "ProviderEndpoint.OPENAI"
    assert ProviderEndpoint.parse("gemini") == ProviderEndpoint.GOOGLE_GEMINI
    assert ProviderEndpoint.parse("custom:gw") == ProviderEndpoint.custom("gw")
    with pytest.raises(ConfigurationError, match="unknown provider 'nope'"):
        ProviderEndpoint.parse("nope")


async def test_types_custom_endpoint_fails_to_dispatch() -> None:
    request = UnifiedRequest.new("m").add_user_message("hi")
    async with CucaClient(ProviderEndpoint.custom("my-gateway")) as client:
        with pytest.raises(ConfigurationError) as info:
            async with client.generate_stream(request):
                pass  # pragma: no cover
    assert str(info.value) == (
        "configuration error: custom endpoints require a registered adapter, "
        "and none is registered for 'my-gateway'"
    )


def test_types_errors_read_like_the_seeds() -> None:
    assert str(cuca.ProviderError("openai", "malformed tool call: {")) == (
        "provider error (openai): malformed tool call: {"
    )
    assert str(cuca.HttpStatusError(429, '{"error":{}}', "rate limited")) == (
        "http status 429: rate limited"
    )
    assert cuca.HttpStatusError(500, "boom").message == "boom"


def test_types_finish_reason_is_one_closed_set_that_reads_as_text() -> None:
    response = cuca.UnifiedResponse(
        ProviderEndpoint.ANTHROPIC,
        "m",
        finish_reason="tool_calls",
        provider_finish_reason="tool_use",
    )
    assert response.finish_reason is cuca.FinishReason.TOOL_CALLS
    assert response.finish_reason == "tool_calls"
    assert [r.value for r in cuca.FinishReason] == [
        "stop", "length", "tool_calls", "content_filter", "refusal", "error", "other"
    ]  # fmt: skip
    with pytest.raises(ConfigurationError, match="not 'end_turn'"):
        cuca.UnifiedResponse(ProviderEndpoint.ANTHROPIC, "m", finish_reason="end_turn")


def test_types_response_and_summary_survive_json_with_both_finish_reasons() -> None:
    response = cuca.UnifiedResponse(
        ProviderEndpoint.GOOGLE_GEMINI,
        "gemini-2.5-flash",
        finish_reason=cuca.FinishReason.TOOL_CALLS,
        provider_finish_reason="STOP",
    )
    assert roundtrip(response, cuca.UnifiedResponse) == response
    assert json.loads(to_json(response))["finish_reason"] == "tool_calls"
    summary = cuca.TurnSummary(finish_reason="length", provider_finish_reason="MAX_TOKENS")
    assert roundtrip(summary, cuca.TurnSummary) == summary


def test_types_a_request_written_before_the_new_fields_still_reads() -> None:
    data = json.loads(to_json(UnifiedRequest.new("m").add_user_message("hi")))
    for key in ("stop", "seed", "top_p", "tool_choice"):
        del data[key]
    read = from_json(json.dumps(data), UnifiedRequest)
    assert (read.stop, read.seed, read.top_p, read.tool_choice) == ((), None, None, None)


def test_types_tool_choice_is_checked_against_the_tools() -> None:
    with pytest.raises(ConfigurationError, match="'required' needs tools"):
        ToolChoice.REQUIRED.check(())
    with pytest.raises(ConfigurationError, match=r"does not declare \(its tools: 'a'\)"):
        ToolChoice.tool("b").check((ToolDefinition("a"),))
    ToolChoice.tool("a").check((ToolDefinition("a"),))
    ToolChoice.NONE.check(())
    assert str(ToolChoice.tool("a")) == "tool:a" and str(ToolChoice.AUTO) == "auto"
