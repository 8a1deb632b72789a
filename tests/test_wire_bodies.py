"""Vendor-shaped request bodies, both ways (``cuca.from_openai`` / ``cuca.to_openai``,
``cuca.from_anthropic`` / ``cuca.to_anthropic``): what a user holding an openai or
anthropic SDK call gets as a ``UnifiedRequest``, what is refused rather than lost, and
that a request written out and read back is the same request."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
from anthropic.types import MessageParam, ToolParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from cuca import (
    AnthropicConfig,
    AnthropicThinkingParams,
    ConfigurationError,
    ImageBase64,
    MessageRole,
    OutputSchema,
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
    from_anthropic,
    from_openai,
    to_anthropic,
    to_openai,
)
from cuca.providers.anthropic.encode import ANTHROPIC, AnthropicAdapter
from cuca.providers.chat.encode import OpenAiCompatAdapter, dialect_of
from cuca.testing import ScriptedTurn, open_scripted_server

ANTHROPIC_ISSUED = ProviderEndpoint.ANTHROPIC
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}

# -- OpenAI chat ------------------------------------------------------------------------


def test_from_openai_reads_every_field_cuca_carries() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather here?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "Call the tool.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "description": "now", "parameters": SCHEMA},
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0.2,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["END"],
        "max_completion_tokens": 300,
        "reasoning_effort": "low",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
        },
        "stream": False,
    }
    expected = (
        UnifiedRequest.new("gpt-4o")
        .add_system_message("Be brief.")
        .add_user_message([Text("Weather here?"), ImageBase64("image/png", "iVBO")])
        .add_assistant_message(
            [Thinking("Call the tool."), ToolCall("call_1", "get_weather", {"city": "Rome"})]
        )
        .add_tool_result("call_1", "sunny")
        .add_tool(ToolDefinition("get_weather", "now", SCHEMA))
        .set_tool_choice(ToolChoice.tool("get_weather"))
        .set_temperature(0.2)
        .set_top_p(0.9)
        .set_seed(7)
        .set_stop("END")
        .set_max_tokens(300)
        .set_thinking(ThinkingEffort.LOW)
        .set_output_schema(SCHEMA, name="weather")
        .set_stream(False)
    )
    assert from_openai(body) == expected


def test_from_openai_takes_the_sdks_typed_params_as_they_are() -> None:
    """What a user of the openai SDK already holds type-checks as the body."""
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    tools: list[ChatCompletionToolParam] = [
        {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}
    ]
    body: CompletionCreateParamsNonStreaming = {
        "model": "gpt-4o",
        "messages": messages,
        "tools": tools,
    }
    request = from_openai(body)
    assert [m.role for m in request.messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
    ]
    assert request.messages[2].content == (Text("Checking."), ToolCall("call_1", "get_weather"))
    assert request.tools == (ToolDefinition("get_weather", "", SCHEMA),)


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


@pytest.mark.parametrize(
    ("body", "refusal"),
    [
        (_chat(n=2), "n is 2, and cuca carries only 1"),
        (_chat(logprobs=True), "logprobs is True"),
        (_chat(parallel_tool_calls=False), "parallel_tool_calls is False"),
        (_chat(user="u-1"), "user has no place in a cuca request"),
        (_chat(logit_bias={"50256": -100}), "logit_bias has no place"),
        (_chat(metadata={"team": "a"}), "metadata has no place"),
        (_chat(frequency_penalty=0.5), "frequency_penalty is 0.5"),
        (_chat(max_tokens=10, max_completion_tokens=20), "disagree: send one"),
        (_chat(reasoning_effort="low", thinking={"type": "enabled"}), "each set thinking"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "hi", "name": "bob"}]},
            r"messages\[0\].name has no place",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image_url",
                                "image_url": {"url": "data:image/png;base64,AA", "detail": "high"},
                            }
                        ],
                    }
                ],
            },
            r"messages\[0\].content\[0\].image_url.detail is 'high'",
        ),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": [{"type": "input_audio"}]}],
            },
            r"messages\[0\].content\[0\].type 'input_audio'",
        ),
        (
            {
                "model": "m",
                "messages": [{"role": "assistant", "reasoning": "a", "reasoning_content": "b"}],
            },
            "disagree: send one",
        ),
        (
            _chat(
                tools=[
                    {"type": "function", "function": {"name": "f", "strict": True}},
                ]
            ),
            r"tools\[0\].function.strict is True",
        ),
        (
            _chat(
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "o", "schema": SCHEMA, "description": "d"},
                }
            ),
            "response_format.json_schema.description has no place",
        ),
    ],
)
def test_from_openai_refuses_a_field_cuca_cannot_carry_naming_it(body: Any, refusal: str) -> None:
    with pytest.raises(ConfigurationError, match=refusal):
        from_openai(body)


def test_from_openai_takes_knobs_at_their_default_value() -> None:
    defaults = {
        "n": 1,
        "logprobs": False,
        "parallel_tool_calls": True,
        "frequency_penalty": 0,
        "presence_penalty": 0.0,
        "store": False,
        "user": None,
    }
    assert from_openai(_chat(**defaults)) == from_openai(_chat())


def test_to_openai_is_the_body_cucas_openai_adapter_posts() -> None:
    request = (
        UnifiedRequest.new("gpt-4o")
        .add_user_message("hi")
        .add_tool("f", "", SCHEMA)
        .set_tool_choice("required")
        .set_thinking(ThinkingEffort.MEDIUM)
        .set_max_tokens(64)
    )
    adapter = OpenAiCompatAdapter(dialect_of(ProviderEndpoint.OPENAI), "https://x/v1", "sk-1")
    assert to_openai(request) == adapter.encode(request).body
    assert to_openai(request)["max_completion_tokens"] == 64


def test_to_openai_leaves_out_what_the_chat_wire_has_no_place_for() -> None:
    """The documented losses: read back, the request says what the wire could hold."""
    request = (
        UnifiedRequest.new("m")
        .add_assistant_message(
            [
                Thinking("plan", signature="sig", provider=ANTHROPIC_ISSUED),
                Thinking("", signature="opaque", provider=ANTHROPIC_ISSUED, redacted=True),
                Text("ok"),
            ]
        )
        .add_tool_result("call_1", "boom", is_error=True, name="f")
        .set_thinking(ThinkingEffort.XHIGH)
    )
    back = from_openai(to_openai(request))
    assert back.messages[0].content == (Thinking("plan"), Text("ok"))
    assert back.messages[1] == UnifiedMessage(
        MessageRole.TOOL, (ToolResult("call_1", "boom"),), tool_call_id="call_1"
    )
    assert back.thinking == ThinkingConfig(True, ThinkingEffort.HIGH)  # seed 001's collapse
    off = from_openai(to_openai(request.set_thinking(False)))
    assert off.thinking is None  # nothing is sent for "off"


# -- what the chat wire carries, drawn at random ---------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_words = _text.filter(bool)
_ids = st.text("abcdef0123456789", min_size=2, max_size=6).map(lambda s: "call_" + s)
_names = st.sampled_from(["get_weather", "search", "run"])
_arguments = st.dictionaries(st.sampled_from(["city", "q", "n"]), st.one_of(_words, st.integers()))
_images = st.builds(
    ImageBase64,
    st.sampled_from(["image/png", "image/jpeg"]),
    st.text("ABCDEFabcdef0123456789+/", min_size=1, max_size=16),
)
_calls = st.builds(ToolCall, _ids, _names, _arguments)
_results = st.builds(ToolResult, _ids, _text)


def _tool_message(result: ToolResult) -> UnifiedMessage:
    return UnifiedMessage(MessageRole.TOOL, (result,), tool_call_id=result.tool_call_id)


@st.composite
def _chat_assistant(draw: st.DrawFn) -> UnifiedMessage:
    blocks: list[Any] = []
    if draw(st.booleans()):
        blocks.append(Thinking(draw(_words)))
    if draw(st.booleans()):
        blocks.append(Text(draw(_words)))
    blocks.extend(draw(st.lists(_calls, max_size=2)))
    return UnifiedMessage(MessageRole.ASSISTANT, tuple(blocks))


_chat_user = st.one_of(
    _text.map(lambda t: UnifiedMessage(MessageRole.USER, (Text(t),))),
    st.lists(st.one_of(_text.map(Text), _images), min_size=1, max_size=3)
    .filter(lambda blocks: any(isinstance(b, ImageBase64) for b in blocks))
    .map(lambda blocks: UnifiedMessage(MessageRole.USER, tuple(blocks))),
)
_chat_messages = st.lists(
    st.one_of(
        _text.map(lambda t: UnifiedMessage(MessageRole.SYSTEM, (Text(t),))),
        _chat_user,
        _chat_assistant(),
        _results.map(_tool_message),
    ),
    min_size=1,
    max_size=5,
)
_tools = st.lists(
    st.builds(ToolDefinition, _names, _text, st.just(SCHEMA)),
    max_size=3,
    unique_by=lambda t: t.name,
)
_schema_names = st.text("abcxyz_-0189", min_size=1, max_size=8)


@st.composite
def _controls(draw: st.DrawFn, request: UnifiedRequest, *, stops: int | None) -> UnifiedRequest:
    """Sampling, stop and tool choice, as any wire takes them."""
    tools = draw(_tools)
    choices = [ToolChoice.AUTO, ToolChoice.NONE, ToolChoice.REQUIRED]
    choices += [ToolChoice.tool(t.name) for t in tools]
    return attrs.evolve(
        request,
        tools=tuple(tools),
        tool_choice=draw(st.sampled_from(choices)) if tools and draw(st.booleans()) else None,
        stop=draw(st.lists(_words, max_size=stops, unique=True)),
        top_p=draw(st.none() | st.floats(0, 1)),
        stream=draw(st.booleans()),
    )


@st.composite
def openai_requests(draw: st.DrawFn) -> UnifiedRequest:
    """Requests in the chat wire's own terms: what ``to_openai`` writes in full."""
    request = UnifiedRequest(
        model=draw(_words),
        messages=tuple(draw(_chat_messages)),
        temperature=draw(st.none() | st.floats(0, 2)),
        max_tokens=draw(st.none() | st.integers(1, 100_000)),
        thinking=draw(
            st.none()
            | st.sampled_from(list(ThinkingEffort)[:4]).map(lambda e: ThinkingConfig(True, e))
        ),
        seed=draw(st.none() | st.integers(0, 2**31 - 1)),
        output_schema=draw(
            st.none()
            | st.builds(OutputSchema, _schema_names, st.just(SCHEMA), strict=st.booleans())
        ),
    )
    return draw(_controls(request, stops=4))


@settings(max_examples=150, deadline=None)
@given(openai_requests())
def test_from_openai_reads_back_what_to_openai_wrote(request: UnifiedRequest) -> None:
    assert from_openai(to_openai(request)) == request


# -- Anthropic Messages ----------------------------------------------------------------


def test_from_anthropic_reads_every_field_cuca_carries() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather here?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Call it.", "signature": "sig1"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "no such city"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "Try again.", "cache_control": {"type": "ephemeral"}},
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "now",
                "input_schema": SCHEMA,
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "temperature": 1,
        "top_p": 0.95,
        "stop_sequences": ["END"],
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
        "stream": True,
    }
    expected = (
        UnifiedRequest.new("claude-sonnet-4-5")
        .add_system_message("Be brief.")
        .add_user_message([Text("Weather here?"), ImageBase64("image/png", "iVBO")])
        .add_assistant_message(
            [
                Thinking("Call it.", signature="sig1", provider=ANTHROPIC_ISSUED),
                Thinking("", signature="opaque", provider=ANTHROPIC_ISSUED, redacted=True),
                ToolCall("toolu_1", "get_weather"),
            ]
        )
        .add_tool_result("toolu_1", "no such city", is_error=True)
        .add_user_message("Try again.")
        .add_tool(ToolDefinition("get_weather", "now", SCHEMA))
        .set_tool_choice("auto")
        .set_thinking(
            ThinkingConfig(True, ThinkingEffort.LOW, AnthropicThinkingParams(budget_tokens=2048))
        )
        .set_temperature(1)
        .set_top_p(0.95)
        .set_stop("END")
        .set_max_tokens(4096)
        .set_output_schema(SCHEMA)
        .set_prompt_cache(PromptCache(system=True, tools=True, messages=(4,)))
    )
    assert from_anthropic(body) == expected


def test_from_anthropic_takes_the_sdks_typed_params_as_they_are() -> None:
    """What a user of the anthropic SDK already holds type-checks as the body."""
    messages: list[MessageParam] = [
        {"role": "user", "content": "Weather in Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
        },
    ]
    tools: list[ToolParam] = [{"name": "get_weather", "input_schema": SCHEMA}]
    body: MessageCreateParamsNonStreaming = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "system": "Be brief.",
        "messages": messages,
        "tools": tools,
    }
    request = from_anthropic(body)
    assert [m.role for m in request.messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
    ]
    assert request.messages[3].content == (ToolResult("toolu_1", "sunny"),)


def _messages(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]} | (
        fields
    )


def _user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return _messages(messages=[{"role": "user", "content": list(blocks)}])


@pytest.mark.parametrize(
    ("body", "refusal"),
    [
        (_messages(top_k=5), "top_k has no place in a cuca request"),
        (_messages(metadata={"user_id": "u"}), "metadata has no place"),
        (_messages(service_tier="standard_only"), "service_tier is 'standard_only'"),
        (
            _messages(output_config={"effort": "low"}),
            "output_config.effort has no place",
        ),
        (
            _messages(tool_choice={"type": "auto", "disable_parallel_tool_use": True}),
            "tool_choice.disable_parallel_tool_use is True",
        ),
        (
            _user(
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "b"},
            ),
            r"messages\[0\].content\[0\].cache_control has no place",
        ),
        (
            _user(
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ),
            r"messages\[0\].content\[0\].cache_control.ttl is '1h'",
        ),
        (
            _user({"type": "text", "text": "a", "citations": [{"type": "char_location"}]}),
            r"messages\[0\].content\[0\].citations",
        ),
        (_user({"type": "document", "source": {}}), r"messages\[0\].content\[0\].type 'document'"),
        (
            _user(
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "image", "source": {}}],
                }
            ),
            r"messages\[0\].content\[0\].content\[0\].type must be text",
        ),
        (
            _messages(tools=[{"name": "f", "input_schema": SCHEMA, "strict": True}]),
            r"tools\[0\].strict is True",
        ),
        (
            _messages(
                tools=[
                    {"name": "f", "input_schema": SCHEMA, "cache_control": {"type": "ephemeral"}},
                    {"name": "g", "input_schema": SCHEMA},
                ]
            ),
            r"tools\[0\].cache_control has no place",
        ),
    ],
)
def test_from_anthropic_refuses_a_field_cuca_cannot_carry_naming_it(
    body: Any, refusal: str
) -> None:
    with pytest.raises(ConfigurationError, match=refusal):
        from_anthropic(body)


def test_to_anthropic_is_the_body_cucas_anthropic_adapter_posts() -> None:
    request = (
        UnifiedRequest.new("claude-sonnet-4-5")
        .add_system_message("Be brief.")
        .add_user_message("hi")
        .set_thinking(ThinkingEffort.HIGH)
    )
    adapter = AnthropicAdapter(ANTHROPIC, "https://x/v1/messages", {"x-api-key": "k"})
    assert to_anthropic(request) == adapter.encode(request).body
    adaptive = to_anthropic(request, AnthropicConfig(adaptive_thinking=True))
    assert adaptive["thinking"] == {"type": "adaptive"}
    assert adaptive["output_config"] == {"effort": "high"}


def test_to_anthropic_leaves_out_what_the_messages_wire_has_no_place_for() -> None:
    """The documented losses: read back, the request says what the wire could hold."""
    request = (
        UnifiedRequest.new("m")
        .add_system_message("a")
        .add_user_message("hi")
        .add_system_message("b")
        .add_assistant_message([Thinking("unsigned"), Text("ok")])
        .set_seed(7)
        .set_thinking(ThinkingEffort.HIGH)
    )
    back = from_anthropic(to_anthropic(request))
    assert back.messages[0] == UnifiedMessage(MessageRole.SYSTEM, (Text("a\nb"),))
    assert back.messages[2].content == (Text("ok"),)  # unsigned thinking: Anthropic refuses it
    assert back.seed is None  # the Messages API has no seed
    assert back.max_tokens == 1024 + 16384  # the adapter's default, plus the budget
    assert back.thinking == ThinkingConfig(
        True, ThinkingEffort.HIGH, AnthropicThinkingParams(budget_tokens=16384)
    )


# -- what the Messages wire carries, drawn at random -----------------------------------

_signatures = st.text("abcXYZ019+/=", min_size=1, max_size=12)
_anthropic_thinking = st.one_of(
    st.builds(Thinking, _text, signature=_signatures, provider=st.just(ANTHROPIC_ISSUED)),
    st.builds(
        Thinking,
        st.just(""),
        signature=_signatures,
        provider=st.just(ANTHROPIC_ISSUED),
        redacted=st.just(True),
    ),
)
_anthropic_turns = st.lists(
    st.one_of(
        st.lists(st.one_of(_words.map(Text), _images), min_size=1, max_size=3).map(
            lambda blocks: UnifiedMessage(MessageRole.USER, tuple(blocks))
        ),
        st.lists(
            st.one_of(_words.map(Text), _calls, _anthropic_thinking), min_size=1, max_size=4
        ).map(lambda blocks: UnifiedMessage(MessageRole.ASSISTANT, tuple(blocks))),
        st.builds(ToolResult, _ids, _text, st.booleans()).map(_tool_message),
    ),
    min_size=1,
    max_size=5,
)
_budgets = st.integers(1024, 32_000).map(
    lambda b: ThinkingConfig(True, _effort_of_budget(b), AnthropicThinkingParams(budget_tokens=b))
)
_adaptive = st.sampled_from(
    [("low", "LOW"), ("medium", "MEDIUM"), ("high", "HIGH"), ("xhigh", "XHIGH"), ("max", "XHIGH")]
).map(lambda e: ThinkingConfig(True, ThinkingEffort[e[1]], AnthropicThinkingParams(effort=e[0])))


def _effort_of_budget(budget: int) -> ThinkingEffort:
    from cuca.providers.anthropic.inbound import effort_of_budget

    return effort_of_budget(budget)


@st.composite
def anthropic_requests(draw: st.DrawFn) -> UnifiedRequest:
    """Requests in the Messages wire's own terms: what ``to_anthropic`` writes in full."""
    system = draw(st.lists(_words.map(lambda t: UnifiedMessage(MessageRole.SYSTEM, t)), max_size=1))
    turns = draw(_anthropic_turns)
    thinking = draw(st.none() | _budgets | _adaptive)
    request = UnifiedRequest(
        model=draw(_words),
        messages=(*system, *turns),
        temperature=draw(st.none() | st.floats(0, 1)),
        max_tokens=draw(st.integers(40_000, 64_000) if thinking else st.integers(1, 64_000)),
        thinking=thinking,
        output_schema=draw(st.none() | st.just(OutputSchema("output", SCHEMA))),
    )
    request = draw(_controls(request, stops=None))
    if thinking is not None:  # Anthropic's extended thinking: no forced tool, top_p >= 0.95
        forced = request.tool_choice is not None and request.tool_choice.mode.value in (
            "required",
            "tool",
        )
        request = attrs.evolve(
            request,
            tool_choice=None if forced else request.tool_choice,
            top_p=None if request.top_p is None else max(request.top_p, 0.95),
        )
    cached = draw(st.lists(st.sampled_from(range(len(system), len(request.messages))), unique=True))
    if draw(st.booleans()):
        cache = PromptCache(
            system=bool(system) and draw(st.booleans()),
            tools=bool(request.tools) and draw(st.booleans()),
            messages=tuple(sorted(cached)),
        )
        request = request.set_prompt_cache(cache if cache != PromptCache() else None)
    return request


@settings(max_examples=150, deadline=None)
@given(anthropic_requests())
def test_from_anthropic_reads_back_what_to_anthropic_wrote(request: UnifiedRequest) -> None:
    assert from_anthropic(to_anthropic(request)) == request


# -- through the vendors' own SDKs -----------------------------------------------------


async def test_to_openai_goes_through_the_openai_sdk_as_its_keyword_arguments() -> None:
    """``create(**to_openai(request))``: the SDK takes every key, sends the body as it is,
    and the server reads back the request."""
    import openai

    request = (
        UnifiedRequest.new("gpt-4o")
        .add_system_message("Be brief.")
        .add_user_message("Weather in Rome?")
        .add_tool("get_weather", "now", SCHEMA)
        .set_tool_choice("required")
        .set_thinking(ThinkingEffort.LOW)
        .set_stop("END")
        .set_seed(7)
        .set_max_tokens(64)
        .set_stream(False)
    )

    async with open_scripted_server([ScriptedTurn("Sunny.")], "chat") as server:

        def create() -> Any:
            with openai.OpenAI(base_url=server.base_url, api_key="sk-test") as sdk:
                return sdk.chat.completions.create(**to_openai(request))

        answer = await trio.to_thread.run_sync(create)
        sent = server.requests[0].json()
    assert answer.choices[0].message.content == "Sunny."
    assert sent == to_openai(request)
    assert from_openai(sent) == request


async def test_to_anthropic_goes_through_the_anthropic_sdk_as_its_keyword_arguments() -> None:
    import anthropic

    request = (
        UnifiedRequest.new("claude-sonnet-4-5")
        .add_system_message("Be brief.")
        .add_user_message("Weather in Rome?")
        .add_tool("get_weather", "now", SCHEMA)
        .set_tool_choice(ToolChoice.tool("get_weather"))
        .set_stop("END")
        .set_max_tokens(64)
        .set_output_schema(SCHEMA)
        .set_stream(False)
    )

    async with open_scripted_server([ScriptedTurn("Sunny.")], "anthropic") as server:

        def create() -> Any:
            with anthropic.Anthropic(base_url=server.url, api_key="sk-test") as sdk:
                return sdk.messages.create(**to_anthropic(request))

        answer = await trio.to_thread.run_sync(create)
        sent = server.requests[0].json()
    assert answer.content[0].text == "Sunny."
    assert sent == to_anthropic(request)
    assert from_anthropic(sent) == request


# -- any request: what the wire holds survives, the rest is left out the same way ------

_any_provider = st.sampled_from(
    [None, ProviderEndpoint.ANTHROPIC, ProviderEndpoint.GOOGLE_GEMINI, ProviderEndpoint.OPENAI]
)
_any_thinking = st.builds(
    Thinking,
    _text,
    signature=st.none() | _signatures,
    provider=_any_provider,
    redacted=st.booleans(),
)
_signed_text = st.builds(Text, _text, signature=st.none() | _signatures, provider=_any_provider)
_signed_calls = st.builds(
    ToolCall, _ids, _names, _arguments, signature=st.none() | _signatures, provider=_any_provider
)
_any_messages = st.lists(
    st.one_of(
        st.lists(_signed_text, max_size=3).map(
            lambda blocks: UnifiedMessage(MessageRole.SYSTEM, tuple(blocks))
        ),
        st.lists(st.one_of(_signed_text, _images), max_size=3).map(
            lambda blocks: UnifiedMessage(MessageRole.USER, tuple(blocks))
        ),
        st.lists(st.one_of(_signed_text, _signed_calls, _any_thinking), max_size=4).map(
            lambda blocks: UnifiedMessage(MessageRole.ASSISTANT, tuple(blocks))
        ),
        st.builds(
            lambda result, name: UnifiedMessage(
                MessageRole.TOOL, (result,), tool_call_id=result.tool_call_id, name=name
            ),
            st.builds(ToolResult, _ids, _text, st.booleans()),
            st.none() | _names,
        ),
    ),
    min_size=1,
    max_size=6,
)


@st.composite
def any_requests(draw: st.DrawFn, *, anthropic: bool) -> UnifiedRequest:
    """Requests with what one wire or the other has no place for: signatures of any
    issuer, redacted thinking, failed tool results, names, several system messages
    anywhere, every effort, thinking off, a seed, breakpoints anywhere."""
    thinking = draw(
        st.none()
        | st.booleans().map(ThinkingConfig)
        | st.sampled_from(list(ThinkingEffort)).map(lambda e: ThinkingConfig(True, e))
    )
    thinking_on = thinking is not None and thinking.enabled
    request = UnifiedRequest(
        model=draw(_words),
        messages=tuple(draw(_any_messages)),
        temperature=draw(st.none() | st.floats(0, 1 if anthropic else 2)),
        max_tokens=draw(st.none() | st.integers(40_000 if thinking_on else 1, 64_000)),
        thinking=thinking,
        seed=draw(st.none() | st.integers(0, 2**31 - 1)),
        prompt_cache=draw(
            st.none()
            | st.builds(
                PromptCache, st.booleans(), st.booleans(), st.lists(st.integers(-6, 5), max_size=3)
            )
        ),
    )
    request = draw(_controls(request, stops=4))
    if anthropic and thinking_on:
        forced = request.tool_choice is not None and request.tool_choice.mode.value in (
            "required",
            "tool",
        )
        request = attrs.evolve(
            request,
            tool_choice=None if forced else request.tool_choice,
            top_p=None if request.top_p is None else max(request.top_p, 0.95),
        )
    return request


@settings(max_examples=150, deadline=None)
@given(any_requests(anthropic=False))
def test_to_openai_of_what_from_openai_read_is_the_same_body(request: UnifiedRequest) -> None:
    body = to_openai(request)
    assert to_openai(from_openai(body)) == body


@settings(max_examples=150, deadline=None)
@given(any_requests(anthropic=True))
def test_to_anthropic_of_what_from_anthropic_read_is_the_same_body(
    request: UnifiedRequest,
) -> None:
    body = to_anthropic(request)
    assume(body["messages"])  # the Messages API takes no conversation without one
    assert to_anthropic(from_anthropic(body)) == body
