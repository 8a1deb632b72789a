"""The ``/responses`` adapter (OpenAI's Responses API): OpenAI, vLLM, LM Studio, llama.cpp.

Transcripts under ``tests/transcripts/*_responses/`` are written from the ``openai``
package's ``types/responses/`` (each frame is checked against those types here), fed
through the SSE parser under every chunking Hypothesis finds, and served over loopback
by the replay server for the round trip.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseStreamEvent
from support.transcripts import decode_chunks, in_stream, transcript

from cuca import (
    ConfigurationError,
    CucaClient,
    ImageBase64,
    LlamaCppConfig,
    LlamaRoute,
    OpenAiApi,
    OpenAiConfig,
    PromptCacheUsage,
    ProviderEndpoint,
    StreamIncomplete,
    Text,
    Thinking,
    ThinkingEffort,
    TokenUsage,
    ToolCall,
    ToolCallError,
    UnifiedRequest,
    merge_blocks,
)
from cuca.providers.base import ClientSettings, Item
from cuca.providers.chat.encode import OpenAiCompatAdapter
from cuca.providers.llamacpp.encode import LlamaChatAdapter
from cuca.providers.registry import adapter_for
from cuca.providers.responses.decode import ResponsesDecoder
from cuca.providers.responses.encode import ResponsesAdapter
from cuca.stages.sse import SseParser
from cuca.testing import Reply, chunkings, open_replay_server

OPENAI = ProviderEndpoint.OPENAI
RESPONSES = OpenAiConfig(api=OpenAiApi.RESPONSES)
KEY = "sk-test-secret-0123456789"
RS_ID = "rs_68af4031e27c8193b4b0d3a0a3e5c2c905438e46b5f69a3b"
ENCRYPTED = (
    "gAAAAABor0AzXr9yY7bK1nW0aQ3vJm4ZtE2Lh6cD8fG0hJ1kL2mN3oP4qR5sT6uV7wX8yZ9_"
    "-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789=="
)
SUMMARY = (
    "**Checking the weather**\n\nThe user wants weather in Paris and Tokyo;"
    " I'll call the tool twice."
)
PARIS = ToolCall("call_sV4r7QpKx2mT9aLw3NbYz1Ud", "get_weather", {"city": "Paris"})
TOKYO = ToolCall("call_Hq8eW3nR5tY1uI0oP2aS4dF6", "get_weather", {"city": "Tokyo", "units": "c"})

# transcript -> (merged blocks, error, usage, cache usage, finish reason)
EXPECTED: dict[str, tuple[list[Any], Any, Any, Any, str | None]] = {
    "openai_responses/text": (
        [Text("Hello! How can I help you today? 日本 ü")],
        None,
        TokenUsage(1117, 46, 0),
        PromptCacheUsage(1024, 0),
        "stop",
    ),
    "openai_responses/reasoning_two_tools": (
        [Thinking(SUMMARY, ENCRYPTED, OPENAI, id=RS_ID), PARIS, TOKYO],
        None,
        TokenUsage(312, 210, 128),
        PromptCacheUsage(0, 0),
        "tool_calls",
    ),
    "openai_responses/final_answer": (
        [
            Thinking(
                "",
                "gAAAAABor0BCq7Yw2Zx9Vb8Nm6Lk4Jh2Gf0Ds8Ap6Oi4Uy2Tr0Ee8Ww6Qq4Zz2Xx0Cc8Vv6Bb4Nn2Mm0==",
                OPENAI,
                id="rs_68af4041a3c48193a0e6b7d2c1f0e9d805438e46b5f69a3b",
            ),
            Text("Paris is 18°C and Tokyo is 24°C."),
        ],
        None,
        TokenUsage(602, 38, 16),
        PromptCacheUsage(512, 0),
        "stop",
    ),
    "openai_responses/incomplete": (
        [Text("Once upon a")],
        None,
        TokenUsage(20, 3, 0),
        PromptCacheUsage(0, 0),
        "length",
    ),
    "openai_responses/failed": (
        [],
        in_stream(
            "openai_responses/failed", 500, "server_error: The model failed to generate a response."
        ),
        None,
        None,
        None,
    ),
    "openai_responses/error": (
        [],
        in_stream(
            "openai_responses/error",
            429,
            "rate_limit_exceeded: Rate limit reached for gpt-5 on tokens per min.",
        ),
        None,
        None,
        None,
    ),
    "vllm_responses/reasoning_tool_call": (
        [
            Thinking(
                "The user wants the weather in Paris.",
                None,
                OPENAI,
                id="rs_4b7e1f0a9c2d4e6f8a1b3c5d",
            ),
            ToolCall("call_5b1e8f2a9c7d4e3f", "get_weather", {"city": "Paris"}),
        ],
        None,
        TokenUsage(44, 35, 12),
        PromptCacheUsage(0, 0),
        "tool_calls",
    ),
    "lm_studio_responses/reasoning": (
        [Thinking("User says hi. Reply briefly.", None, OPENAI, id="rs_lms_1"), Text("Hi there!")],
        None,
        TokenUsage(70, 22, 9),
        PromptCacheUsage(64, 0),
        "stop",
    ),
}


def decode(
    chunks: list[bytes], endpoint: ProviderEndpoint = OPENAI
) -> tuple[list[Item], Exception | None, Any]:
    run = decode_chunks(ResponsesDecoder(endpoint), chunks)
    return run.items, run.error, run.summary


def merged(items: list[Item]) -> list[Any]:
    blocks = [i for i in items if not isinstance(i, Exception)]
    return list(merge_blocks(blocks))  # type: ignore[arg-type]


# -- the transcripts are faithful to the SDK's types ---------------------------------------


def sdk_event_types() -> dict[str, Any]:
    """The SDK's event classes by their ``type`` literal."""
    union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
    return {
        typing.get_args(c.model_fields["type"].annotation)[0]: c for c in typing.get_args(union)
    }


def older_usage(frame: dict[str, Any]) -> dict[str, Any]:
    """vLLM and LM Studio build on an older SDK whose ``input_tokens_details`` has no
    ``cache_write_tokens`` yet (the current SDK requires it): fill it in to validate."""
    usage = frame.get("response", {}).get("usage")
    if usage:
        usage["input_tokens_details"].setdefault("cache_write_tokens", 0)
    return frame


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_responses_transcript_frames_validate_against_the_openai_types(name: str) -> None:
    """Every frame validates as the ``openai`` package's event class for its ``type``,
    so field names and required fields are the SDK's, not ours."""
    classes = sdk_event_types()
    events = SseParser().feed(transcript(name))
    assert events
    for event in events:
        frame = json.loads(event.data)
        if not name.startswith("openai_"):
            frame = older_usage(frame)
        parsed = classes[frame["type"]].model_validate(frame)
        if event.event != "message":  # OpenAI and vLLM name the event, LM Studio does not
            assert event.event == parsed.type


# -- decoding ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_responses_transcript_decodes_to_blocks_usage_and_finish_reason(name: str) -> None:
    blocks, error, usage, cache, reason = EXPECTED[name]
    items, got_error, summary = decode([transcript(name)])
    assert merged(items) == blocks
    assert got_error == error
    assert (summary.usage, summary.prompt_cache_usage, summary.finish_reason) == (
        usage,
        cache,
        reason,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_responses_any_chunking_gives_the_same_items(name: str, data: st.DataObject) -> None:
    body = transcript(name)
    chunks = data.draw(chunkings(body))
    assert decode(chunks)[:2] == decode([body])[:2]


def test_responses_byte_at_a_time_gives_the_same_items() -> None:
    body = transcript("openai_responses/reasoning_two_tools")
    assert decode([body[i : i + 1] for i in range(len(body))])[:2] == decode([body])[:2]


def test_responses_interleaved_argument_deltas_are_kept_apart() -> None:
    """Two calls whose argument fragments alternate: each call gets its own arguments,
    in the order the calls were opened."""
    items, _, _ = decode([transcript("openai_responses/reasoning_two_tools")])
    assert [i for i in items if isinstance(i, ToolCall)] == [PARIS, TOKYO]


def frames(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


COMPLETED = {"type": "response.completed", "response": {"usage": None}}


def call_added(item_id: str, call_id: str, name: str = "f") -> dict[str, Any]:
    item = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name}
    return {"type": "response.output_item.added", "item": {**item, "arguments": ""}}


def test_responses_call_without_argument_events_is_taken_from_the_done_item() -> None:
    """A server that sends the whole call in ``output_item.done`` only: one ToolCall."""
    item = {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f"}
    done = {"type": "response.output_item.done", "item": {**item, "arguments": '{"a": 1}'}}
    items, error, _ = decode([frames(call_added("fc_1", "c1"), done, COMPLETED)])
    assert error is None
    assert items == [ToolCall("c1", "f", {"a": 1})]


def test_responses_malformed_arguments_are_an_error_item_and_the_turn_goes_on() -> None:
    """What the user sees: a ToolCallError item (a ProviderError) with the call's id,
    name and raw arguments, then the text."""
    args = {"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": "[1]"}
    text = {"type": "response.output_text.delta", "delta": "ok"}
    items, error, summary = decode([frames(call_added("fc_1", "c1"), args, text, COMPLETED)])
    assert error is None
    message = "malformed tool call: [1]"
    bad = ToolCallError("openai", message, tool_call_id="c1", name="f", raw="[1]")
    assert items == [bad, Text("ok")]
    assert summary.finish_reason == "tool_calls"


def test_responses_unknown_events_are_ignored() -> None:
    unknown = {"type": "response.web_search_call.searching", "item_id": "ws_1"}
    mystery = {"type": "response.something_new", "delta": "x"}
    items, error, _ = decode([frames(unknown, mystery, COMPLETED)])
    assert (items, error) == ([], None)


def test_responses_cut_before_the_end_is_a_transport_error() -> None:
    body = transcript("openai_responses/text")
    cut = body.index(b"event: response.completed")
    items, error, _ = decode([body[:cut]])
    assert isinstance(error, StreamIncomplete)
    assert merged(items) == [Text("Hello! How can I help you today? 日本 ü")]


# -- encoding ------------------------------------------------------------------------------


def adapter(endpoint: ProviderEndpoint = OPENAI, config: Any = RESPONSES, **kw: Any) -> Any:
    return adapter_for(ClientSettings(endpoint, kw.get("base_url"), kw.get("key", KEY), config))


def test_responses_request_body_follows_the_sdk_params() -> None:
    request = (
        UnifiedRequest.new("gpt-5")
        .add_system_message("Be brief.")
        .add_user_message("Weather in Paris?")
        .set_max_tokens(500)
        .set_temperature(0.5)
        .set_thinking(ThinkingEffort.LOW)
        .add_tool("get_weather", "Current weather", {"type": "object", "properties": {}})
    )
    wire = adapter().encode(request)
    assert wire.url == "https://api.openai.com/v1/responses"
    assert wire.headers["authorization"] == f"Bearer {KEY}"
    assert wire.body == {
        "model": "gpt-5",
        "input": [{"role": "user", "content": "Weather in Paris?"}],
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "instructions": "Be brief.",
        "max_output_tokens": 500,
        "temperature": 0.5,
        "reasoning": {"effort": "low", "summary": "auto"},
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Current weather",
                "parameters": {"type": "object", "properties": {}},
            }
        ],
    }


def test_responses_thinking_off_sends_no_reasoning_and_images_are_input_images() -> None:
    image = ImageBase64("image/png", "iVBORw0KGgo=")
    request = UnifiedRequest.new("gpt-5").add_user_message([Text("What is it?"), image])
    body = adapter().encode(request.set_thinking(False)).body
    assert "reasoning" not in body
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is it?"},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,iVBORw0KGgo=",
                    "detail": "auto",
                },
            ],
        }
    ]


def test_responses_thinking_of_another_provider_is_not_replayed() -> None:
    """A signed Thinking block from Anthropic means nothing to OpenAI: only the text goes."""
    foreign = Thinking("hmm", "sig", ProviderEndpoint.ANTHROPIC)
    request = (
        UnifiedRequest.new("m")
        .add_user_message("hi")
        .add_assistant_message([foreign, Text("Hello")])
    )
    body = adapter().encode(request).body
    assert body["input"][1:] == [{"role": "assistant", "content": "Hello"}]


@pytest.mark.parametrize(
    "endpoint,config,url",
    [
        (OPENAI, RESPONSES, "https://api.openai.com/v1/responses"),
        (ProviderEndpoint.VLLM, RESPONSES, "http://127.0.0.1:8000/v1/responses"),
        (ProviderEndpoint.LM_STUDIO, RESPONSES, "http://127.0.0.1:1234/v1/responses"),
        (ProviderEndpoint.LLAMA_CPP, RESPONSES, "http://127.0.0.1:8080/v1/responses"),
        (
            ProviderEndpoint.LLAMA_CPP,
            LlamaCppConfig(route=LlamaRoute.RESPONSES),
            "http://127.0.0.1:8080/v1/responses",
        ),
    ],
)
def test_responses_selected_per_client_by_config(
    endpoint: ProviderEndpoint, config: Any, url: str
) -> None:
    client = CucaClient(endpoint, api_key=KEY, provider_config=config)
    chosen = client.adapter()
    assert isinstance(chosen, ResponsesAdapter)
    assert chosen.url == url
    assert chosen.endpoint == endpoint


def test_responses_chat_stays_the_default() -> None:
    assert type(adapter(config=None)) is OpenAiCompatAdapter  # not its Responses subclass
    assert type(adapter(config=OpenAiConfig())) is OpenAiCompatAdapter
    llama = adapter(ProviderEndpoint.LLAMA_CPP, OpenAiConfig(api=OpenAiApi.CHAT))
    assert type(llama) is LlamaChatAdapter  # the chat adapter, with llama-server's counting


def test_responses_wrong_config_type_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="vllm takes an OpenAiConfig, not LlamaCppConfig"):
        adapter(ProviderEndpoint.VLLM, LlamaCppConfig())


def test_responses_openai_without_a_key_fails_before_any_io() -> None:
    with pytest.raises(ConfigurationError, match="requires an API key"):
        adapter(key=None).encode(UnifiedRequest.new("gpt-5").add_user_message("hi"))


# -- the round trip ------------------------------------------------------------------------


async def test_responses_round_trip_thinking_two_tools_results_and_final_answer() -> None:
    """Turn 1 thinks (summary + encrypted reasoning) and calls two tools; both results go
    back; turn 2 answers. The second request replays the reasoning item, with its id and
    encrypted content, before the calls it preceded, then each output by ``call_id``."""
    replies = [
        Reply(transcript("openai_responses/reasoning_two_tools")),
        Reply(transcript("openai_responses/final_answer")),
    ]
    request = UnifiedRequest.new("gpt-5").add_user_message("Weather in Paris and Tokyo?")
    request = request.set_thinking(ThinkingEffort.LOW).add_tool("get_weather")
    async with open_replay_server(replies) as server:
        async with CucaClient(
            OPENAI, base_url=f"{server.url}/v1", api_key=KEY, provider_config=RESPONSES
        ) as client:
            first = await client.generate(request)
            follow_up = request.add_message(first.message)
            follow_up = follow_up.add_tool_result(PARIS.id, "18C").add_tool_result(TOKYO.id, "24C")
            second = await client.generate(follow_up)
        sent = [r.json() for r in server.requests]
    assert [r.path for r in server.requests] == ["/v1/responses", "/v1/responses"]
    assert list(first.blocks) == [Thinking(SUMMARY, ENCRYPTED, OPENAI, id=RS_ID), PARIS, TOKYO]
    assert second.text == "Paris is 18°C and Tokyo is 24°C."
    assert second.response.usage == TokenUsage(602, 38, 16)
    assert second.response.prompt_cache_usage == PromptCacheUsage(512, 0)
    assert sent[1]["input"] == [
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {
            "type": "reasoning",
            "id": RS_ID,
            "summary": [{"type": "summary_text", "text": SUMMARY}],
            "encrypted_content": ENCRYPTED,
        },
        {
            "type": "function_call",
            "call_id": PARIS.id,
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {
            "type": "function_call",
            "call_id": TOKYO.id,
            "name": "get_weather",
            "arguments": '{"city": "Tokyo", "units": "c"}',
        },
        {"type": "function_call_output", "call_id": PARIS.id, "output": "18C"},
        {"type": "function_call_output", "call_id": TOKYO.id, "output": "24C"},
    ]
    assert sent[1]["store"] is False
    assert sent[1]["include"] == ["reasoning.encrypted_content"]


def test_responses_unsigned_reasoning_goes_back_as_reasoning_text() -> None:
    """vLLM and LM Studio send reasoning text without encrypted content: it goes back
    as the item's ``content``, with the item's id."""
    vllm = ProviderEndpoint.VLLM
    items, _, _ = decode([transcript("vllm_responses/reasoning_tool_call")], vllm)
    blocks = merged(items)
    request = UnifiedRequest.new("m").add_user_message("hi").add_assistant_message(blocks)
    body = adapter(vllm).encode(request).body
    assert body["input"][1] == {
        "type": "reasoning",
        "id": "rs_4b7e1f0a9c2d4e6f8a1b3c5d",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "The user wants the weather in Paris."}],
    }
