"""The Gemini adapter: request bodies, the framer for raw error objects, the decoder (under
any chunking, against google-genai's response types) and whole turns over HTTP."""

from __future__ import annotations

import base64
import itertools
import json
import re
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.transcripts import transcript

from cuca import (
    ConfigurationError,
    CucaClient,
    CucaError,
    GeminiThinkingParams,
    HttpStatusError,
    ImageBase64,
    MessageRole,
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
)
from cuca.providers.base import ClientSettings, Item
from cuca.providers.gemini.decode import GeminiDecoder
from cuca.providers.gemini.encode import GeminiFramer, make_gemini
from cuca.stages.sse import SseEvent
from cuca.testing import Reply, chunk_sizes, chunkings, open_replay_server
from cuca.types import PromptCacheUsage, TokenUsage, TurnSummary

GEMINI = ProviderEndpoint.GOOGLE_GEMINI
SETTINGS = ClientSettings(GEMINI, api_key="AIza-test")
MODEL = "gemini-3-pro-preview"
REQUEST = UnifiedRequest.new(MODEL).add_user_message("Weather in San Francisco?")
TRANSCRIPTS = [
    "text_signature",
    "tool_call",
    "thoughts_parallel_calls",
    "usage_only_final",
    "function_call_with_id",
    "raw_error",
    "cut",
    "malformed_call",
]
COMPLETE = [n for n in TRANSCRIPTS if n not in ("raw_error", "cut")]
CALL_SIG = "EpEgCo4gAb4+9vvWZnVuY3Rpb24tY2FsbC1zaWduYXR1cmUtZml4dHVyZQ=="
TEXT_SIG = "EpAICo0IAb4+9vukZW1wdHktdGV4dC1wYXJ0LXNpZ25hdHVyZS1maXh0dXJl"
SYNTHETIC = re.compile(r"call_[0-9a-f]{16}")


@attrs.frozen
class Decoded:
    items: list[Item]
    error: CucaError | None
    summary: TurnSummary


def decode_bytes(chunks: list[bytes]) -> Decoded:
    """Run chunks through Gemini's framer and a decoder, as the pipeline does; ids of
    calls that came without one are numbered, so runs compare equal."""
    counter = itertools.count()
    decoder = GeminiDecoder(new_id=lambda: f"call_{next(counter):016x}")
    framer = make_gemini(SETTINGS).new_framer()
    items: list[Item] = []
    try:
        for chunk in chunks:
            for event in framer.feed(chunk):
                items += decoder.feed(event)
        for event in framer.close():
            items += decoder.feed(event)
        items += decoder.close()
    except CucaError as exc:
        return Decoded(items, exc, decoder.summary())
    return Decoded(items, None, decoder.summary())


def decode(name: str, chunks: list[bytes] | None = None) -> Decoded:
    return decode_bytes(chunks if chunks is not None else [transcript(f"gemini/{name}")])


def body(request: UnifiedRequest) -> dict[str, Any]:
    encoded: dict[str, Any] = make_gemini(SETTINGS).encode(request).body
    return encoded


# -- request -------------------------------------------------------------------------


def test_gemini_encode_url_and_headers() -> None:
    http = make_gemini(SETTINGS).encode(REQUEST)
    assert http.url == (
        "https://generativelanguage.googleapis.com/v1beta/models/"
        "gemini-3-pro-preview:streamGenerateContent?alt=sse"
    )
    assert http.headers["x-goog-api-key"] == "AIza-test"
    assert "AIza-test" not in repr(http)


def test_gemini_encode_strips_models_prefix_and_trailing_slash() -> None:
    settings = ClientSettings(GEMINI, base_url="http://127.0.0.1:9/", api_key="k")
    request = UnifiedRequest.new("models/gemini-2.5-flash").add_user_message("hi")
    url = make_gemini(settings).encode(request).url
    assert url == "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def test_gemini_encode_missing_key_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as info:
        make_gemini(ClientSettings(GEMINI)).encode(REQUEST)
    assert str(info.value) == (
        "configuration error: gemini requires an api key: "
        "pass api_key= or set GEMINI_API_KEY or GOOGLE_API_KEY"
    )


def test_gemini_encode_minimal_body() -> None:
    assert body(REQUEST.add_system_message("Be brief.")) == {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [{"role": "user", "parts": [{"text": "Weather in San Francisco?"}]}],
    }


def test_gemini_encode_generation_config() -> None:
    encoded = body(REQUEST.set_temperature(0.5).set_max_tokens(2048))
    assert encoded["generationConfig"] == {"temperature": 0.5, "maxOutputTokens": 2048}


@pytest.mark.parametrize(
    ("effort", "level"),
    [
        (ThinkingEffort.MINIMAL, "LOW"),
        (ThinkingEffort.LOW, "LOW"),
        (ThinkingEffort.MEDIUM, "MEDIUM"),
        (ThinkingEffort.HIGH, "HIGH"),
        (ThinkingEffort.XHIGH, "HIGH"),
    ],
)
def test_gemini_encode_thinking_level_table(effort: ThinkingEffort, level: str) -> None:
    config = body(REQUEST.set_thinking(effort))["generationConfig"]["thinkingConfig"]
    assert config == {"thinkingLevel": level, "includeThoughts": True}


@pytest.mark.parametrize(
    ("thinking", "config"),
    [
        (ThinkingConfig.off(), {"includeThoughts": False}),
        (ThinkingConfig(True), {"includeThoughts": True}),
        (
            ThinkingConfig(True, ThinkingEffort.LOW, GeminiThinkingParams(thinking_budget=512)),
            {"thinkingBudget": 512, "includeThoughts": True},
        ),
        (
            ThinkingConfig(
                True, ThinkingEffort.LOW, GeminiThinkingParams(thinking_level="MINIMAL")
            ),
            {"thinkingLevel": "MINIMAL", "includeThoughts": True},
        ),
    ],
)
def test_gemini_encode_thinking_config(thinking: ThinkingConfig, config: dict[str, Any]) -> None:
    assert body(REQUEST.set_thinking(thinking))["generationConfig"]["thinkingConfig"] == config


def test_gemini_encode_no_thinking_no_generation_config() -> None:
    assert "generationConfig" not in body(REQUEST)


def test_gemini_encode_tools_as_function_declarations() -> None:
    schema = {"type": "object", "properties": {"location": {"type": "string"}}}
    encoded = body(REQUEST.add_tool("weather", "Current weather", schema))
    assert encoded["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "weather",
                    "description": "Current weather",
                    "parametersJsonSchema": schema,
                }
            ]
        }
    ]


def test_gemini_encode_image_as_inline_data() -> None:
    request = UnifiedRequest.new(MODEL).add_user_message(
        [Text("What is this?"), ImageBase64("image/png", "iVBORw0KGgo=")]
    )
    assert body(request)["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}
    }


def test_gemini_encode_function_responses_matched_by_name() -> None:
    request = (
        REQUEST.add_assistant_message(
            [
                ToolCall(
                    "call_0123456789abcdef", "weather", {"location": "Paris"}, provider=GEMINI
                ),
                ToolCall("srv-7", "clock", {}, provider=GEMINI),
                ToolCall("toolu_9", "lookup", {}),
            ]
        )
        .add_tool_result("call_0123456789abcdef", "18C")  # name looked up from the call
        .add_tool_result("srv-7", "noon", name="clock_v2")  # the message's name wins
        .add_tool_result("toolu_9", "boom", is_error=True)
        .add_tool_result("unknown-id", "?")  # no call, no name: the id itself
    )
    contents = body(request)["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "weather", "response": {"output": "18C"}}},
        {"functionResponse": {"name": "clock_v2", "response": {"output": "noon"}, "id": "srv-7"}},
        {"functionResponse": {"name": "lookup", "response": {"error": "boom"}}},
        {"functionResponse": {"name": "unknown-id", "response": {"output": "?"}}},
    ]


def test_gemini_encode_plain_tool_message() -> None:
    message = UnifiedMessage(MessageRole.TOOL, "18C", tool_call_id="x", name="weather")
    parts = body(REQUEST.add_message(message))["contents"][-1]["parts"]
    assert parts == [{"functionResponse": {"name": "weather", "response": {"output": "18C"}}}]


def test_gemini_encode_replays_signatures_on_their_parts() -> None:
    request = REQUEST.add_assistant_message(
        [
            Thinking("anthropic thinking", "asig", ProviderEndpoint.ANTHROPIC),
            Thinking("Plan: call weather.", provider=GEMINI),
            Text("Checking."),
            ToolCall("call_0123456789abcdef", "weather", {"location": "SF"}, CALL_SIG, GEMINI),
            ToolCall("srv-id", "weather", {"location": "LA"}, provider=GEMINI),
            Text("", TEXT_SIG, GEMINI),
            Text("", "foreign", ProviderEndpoint.ANTHROPIC),
        ]
    )
    assert body(request)["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "Plan: call weather.", "thought": True},
            {"text": "Checking."},
            {
                "functionCall": {"name": "weather", "args": {"location": "SF"}},
                "thoughtSignature": CALL_SIG,
            },
            {"functionCall": {"name": "weather", "args": {"location": "LA"}, "id": "srv-id"}},
            {"text": "", "thoughtSignature": TEXT_SIG},
        ],
    }


def test_gemini_encode_foreign_call_ids_are_not_sent() -> None:
    request = REQUEST.add_assistant_message(ToolCall("call_abc", "weather", {})).add_tool_result(
        "call_abc", "ok"
    )
    contents = body(request)["contents"]
    assert contents[1]["parts"] == [{"functionCall": {"name": "weather", "args": {}}}]
    assert "id" not in contents[2]["parts"][0]["functionResponse"]


def test_gemini_error_message() -> None:
    adapter = make_gemini(SETTINGS)
    error = {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}}
    assert adapter.error_message(400, json.dumps(error)) == "API key not valid."
    assert adapter.error_message(429, json.dumps([error])) == "API key not valid."
    assert adapter.error_message(500, "oops") is None


# -- framing -------------------------------------------------------------------------


def test_gemini_framer_turns_a_raw_error_object_into_an_event() -> None:
    framer = GeminiFramer()
    events = framer.feed(transcript("gemini/raw_error"))
    assert [e.event for e in events] == ["message", "error"]
    assert json.loads(events[1].data)["error"]["code"] == 503
    assert framer.close() == []


def test_gemini_framer_flushes_an_unterminated_error_at_close() -> None:
    framer = GeminiFramer()
    error = b'{"error": {"code": 500, "message": "x", "status": "INTERNAL"}}'
    raw = b'data: {"candidates":[]}\r\n\r\n' + error
    assert [e.event for e in framer.feed(raw)] == ["message"]
    events = framer.close()
    assert [e.event for e in events] == ["error"]
    assert events[0].data == error.decode()


def test_gemini_framer_passes_on_an_endless_raw_object() -> None:
    framer = GeminiFramer()
    events = framer.feed(b"{\n" + b'  "x": "' + b"y" * 70_000 + b'",\n')
    assert [e.event for e in events] == ["error"]


def test_gemini_framer_ignores_stray_lines_that_start_no_json() -> None:
    framer = GeminiFramer()
    events = framer.feed(b"foo: bar\r\ndata: {}\r\n\r\n")
    assert events == [SseEvent("{}")]
    assert framer.close() == []


# -- decoding ------------------------------------------------------------------------


def test_gemini_decoder_text_and_signature_on_an_empty_part() -> None:
    decoded = decode("text_signature")
    assert decoded.error is None
    assert decoded.items == [
        Text('There are **3** "r"s in strawberry.\n\n'),
        Text("St**r**awbe**rr**y"),
        Text("", TEXT_SIG, GEMINI),
    ]
    assert decoded.summary == TurnSummary(
        TokenUsage(9, 23 + 302, 302), None, "stop", provider_finish_reason="STOP"
    )


def test_gemini_decoder_function_call_without_id_gets_one() -> None:
    decoder = GeminiDecoder()
    items = [
        i for e in GeminiFramer().feed(transcript("gemini/tool_call")) for i in decoder.feed(e)
    ]
    (call,) = items
    assert isinstance(call, ToolCall)
    assert SYNTHETIC.fullmatch(call.id)
    assert (call.name, call.arguments) == ("weather", {"location": "San Francisco"})
    assert (call.signature, call.provider) == (CALL_SIG, GEMINI)
    assert decoder.close() == []


def test_gemini_decoder_keeps_a_server_id() -> None:
    (call,) = decode("function_call_with_id").items
    assert isinstance(call, ToolCall) and call.id == "a1b2c3d4"


def test_gemini_decoder_thoughts_and_parallel_calls() -> None:
    decoded = decode("thoughts_parallel_calls")
    assert decoded.items == [
        Thinking("The user wants the weather in two cities, ", provider=GEMINI),
        Thinking("so I call weather twice.", provider=GEMINI),
        ToolCall(
            "call_0000000000000000",
            "weather",
            {"location": "Paris"},
            "CiQBcsjafHBhcmFsbGVsLWZpcnN0LWNhbGwtc2lnbmF0dXJl",
            GEMINI,
        ),
        ToolCall(
            "call_0000000000000001",
            "weather",
            {"location": "Tokyo", "unit": "celsius"},
            None,
            GEMINI,
        ),
    ]
    assert decoded.summary.usage == TokenUsage(58, 24 + 22, 22)


def test_gemini_decoder_usage_only_final_chunk() -> None:
    decoded = decode("usage_only_final")
    assert decoded.items == [Text("Cached context says hi.")]
    assert decoded.summary.usage == TokenUsage(12 + 65, 71 + 89, 89)  # + toolUsePrompt
    assert decoded.summary.prompt_cache_usage == PromptCacheUsage(read_tokens=4)
    assert decoded.summary.provider_finish_reason == "STOP"
    assert decoded.summary.finish_reason == "stop"


def test_gemini_decoder_raw_error_object_ends_the_turn() -> None:
    decoded = decode("raw_error")
    assert decoded.items == [Text("The first half of")]
    # "code": 503, "status": "UNAVAILABLE": a ServerError, as the status would have been
    assert isinstance(decoded.error, ServerError)
    assert (decoded.error.status, decoded.error.message, decoded.error.provider) == (
        503,
        "UNAVAILABLE: The model is overloaded. Please try again later.",
        "gemini",
    )


def test_gemini_decoder_truncated_raw_object_is_a_provider_error() -> None:
    raw = b'data: {"candidates":[]}\r\n\r\n{\n  "error": {\n    "code": 500,\n'
    decoded = decode_bytes([raw])
    assert isinstance(decoded.error, ProviderError)
    assert decoded.error.message.startswith("unexpected text outside SSE framing: {")


def test_gemini_decoder_eof_before_finish_reason_is_a_transport_error() -> None:
    decoded = decode("cut")
    assert decoded.items == [Text("No finish reason")]
    assert isinstance(decoded.error, TransportError)


def test_gemini_decoder_malformed_call_is_an_item() -> None:
    decoded = decode("malformed_call")
    assert decoded.error is None
    assert decoded.items == [
        ToolCallError(
            "gemini",
            'malformed tool call: {"name": "weather", "args": ["Paris"]}',
            tool_call_id="call_0000000000000000",  # Gemini sent none: a fresh one to answer
            name="weather",
            raw='["Paris"]',
        ),
        ToolCall("call_0000000000000001", "weather", {"location": "Rome"}, None, GEMINI),
    ]


@pytest.mark.parametrize(
    ("call", "name", "raw"),
    [
        (5, None, "5"),
        ({"name": 7, "args": {"x": 1}}, None, '{"x": 1}'),
        ({"name": "weather", "args": "Paris"}, "weather", '"Paris"'),
    ],
)
def test_gemini_decoder_a_wrongly_typed_call_is_never_dropped(
    call: Any, name: str | None, raw: str
) -> None:
    """A part that names a ``functionCall`` of the wrong shape is not a wrongly typed
    value that counts as absent: the user sees a ToolCallError item with what came (so a
    tool loop answers it), and the turn goes on to its answer."""
    chunks = [
        {"candidates": [{"content": {"parts": [{"functionCall": call}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "ok"}]}, "finishReason": "STOP"}]},
    ]
    decoded = decode_bytes([b"".join(f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks)])
    assert decoded.error is None
    error, text = decoded.items
    assert isinstance(error, ToolCallError)
    assert error.message == f"malformed tool call: {json.dumps(call)}"
    assert (error.tool_call_id, error.name, error.raw) == ("call_0000000000000000", name, raw)
    assert text == Text("ok")


def test_gemini_decoder_function_call_null_is_absent() -> None:
    """A proxy that writes every field, null when unset: `"functionCall": null` is no
    call and `"error": null` no error, as null is absent everywhere; the text is read."""
    part = {"text": "hi", "functionCall": None, "thought": None}
    content = {"parts": [part]}
    chunk = {"candidates": [{"content": content, "finishReason": "STOP"}], "error": None}
    decoded = decode_bytes([f"data: {json.dumps(chunk)}\r\n\r\n".encode()])
    assert decoded.error is None
    assert decoded.items == [Text("hi")]


def test_gemini_decoder_blocked_prompt_is_a_clean_end() -> None:
    chunk = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 7}}
    frame = f"data: {json.dumps(chunk)}\r\n\r\n".encode()
    decoded = decode_bytes([frame])
    assert decoded.error is None
    assert decoded.summary.provider_finish_reason == "SAFETY"
    assert decoded.summary.finish_reason == "content_filter"


def test_gemini_decoder_lf_framing_works_too() -> None:
    lf = transcript("gemini/text_signature").replace(b"\r\n", b"\n")
    assert decode_bytes([lf]) == decode("text_signature")


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(TRANSCRIPTS))
def test_gemini_decoder_any_chunking_gives_the_same_turn(data: st.DataObject, name: str) -> None:
    chunks = data.draw(chunkings(transcript(f"gemini/{name}")))
    assert decode(name, chunks) == decode(name)


# -- google-genai's response types agree ---------------------------------------------


def sdk_response(data: str) -> Any:
    """Parse one chunk the way google-genai's ``generate_content_stream`` does."""
    from google.genai import models, types

    fields = models._GenerateContentResponse_from_mldev(json.loads(data))
    return types.GenerateContentResponse._from_response(response=fields, kwargs={})


def sdk_parts_and_usage(name: str) -> tuple[list[Any], Any]:
    parts: list[Any] = []
    usage = None
    for event in GeminiFramer().feed(transcript(f"gemini/{name}")):
        response = sdk_response(event.data)
        if response.candidates and response.candidates[0].content:
            parts += response.candidates[0].content.parts or []
        usage = response.usage_metadata or usage
    return parts, usage


def sdk_item(part: Any) -> Any:
    signature = part.thought_signature and base64.b64encode(part.thought_signature).decode()
    if part.function_call:
        call = part.function_call
        return ("call", call.name, call.args, signature, call.id)
    if not part.text and not signature:
        return None
    return ("thought" if part.thought else "text", part.text or "", signature)


def cuca_item(item: Item) -> Any:
    if isinstance(item, ToolCallError):  # a synthetic id is fresh on every run
        return ("malformed", item.message, item.name, item.raw)
    if isinstance(item, CucaError):
        return item
    if isinstance(item, ToolCall):
        server_id = None if SYNTHETIC.fullmatch(item.id) else item.id
        return ("call", item.name, dict(item.arguments), item.signature, server_id)
    if isinstance(item, Thinking):
        return ("thought", item.text, item.signature)
    assert isinstance(item, Text)
    return ("text", item.text, item.signature)


@pytest.mark.parametrize("name", [n for n in COMPLETE if n != "malformed_call"])
def test_gemini_decoder_matches_google_genai(name: str) -> None:
    parts, usage = sdk_parts_and_usage(name)
    decoded = decode(name)
    expected = [x for x in map(sdk_item, parts) if x is not None]
    assert [cuca_item(i) for i in decoded.items] == expected
    thoughts = usage.thoughts_token_count
    assert decoded.summary.usage == TokenUsage(
        usage.prompt_token_count + (usage.tool_use_prompt_token_count or 0),
        (usage.candidates_token_count or 0) + (thoughts or 0),
        thoughts,
    )
    cached = usage.cached_content_token_count
    assert decoded.summary.prompt_cache_usage == (
        PromptCacheUsage(read_tokens=cached) if cached is not None else None
    )


# -- over HTTP -------------------------------------------------------------------------


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(COMPLETE))
async def test_gemini_over_http_at_random_chunk_boundaries(data: st.DataObject, name: str) -> None:
    raw = transcript(f"gemini/{name}")
    sizes = data.draw(chunk_sizes(len(raw), max_chunks=40))
    async with open_replay_server(Reply(raw, chunks=sizes)) as server:
        async with CucaClient(GEMINI, base_url=server.url, api_key="AIza-test") as client:
            async with client.generate_stream(REQUEST) as stream:
                items = [item async for item in stream]
        sent = server.requests[0]
    expected = decode(name)
    assert [cuca_item(i) for i in items] == [cuca_item(i) for i in expected.items]
    assert stream.response is not None
    assert stream.response.usage == expected.summary.usage
    assert stream.response.finish_reason == expected.summary.finish_reason
    assert sent.path == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    assert sent.headers["x-goog-api-key"] == "AIza-test"


@pytest.mark.parametrize("tail", [b"", b"\n"])
async def test_gemini_over_http_raw_error_is_raised(tail: bytes) -> None:
    raw = transcript("gemini/raw_error").rstrip(b"\n") + tail
    async with open_replay_server(Reply(raw, chunks=[7] * 10)) as server:
        async with CucaClient(GEMINI, base_url=server.url, api_key="k") as client:
            items: list[Any] = []
            with pytest.raises(ServerError, match="UNAVAILABLE: The model is overloaded"):
                async with client.generate_stream(REQUEST) as stream:
                    async for item in stream:
                        items.append(item)
    assert items == [Text("The first half of")]


async def test_gemini_over_http_status_error_carries_the_message() -> None:
    error = [{"error": {"code": 400, "message": "API key not valid.", "status": "BAD"}}]
    headers = [("content-type", "application/json")]
    reply = Reply(json.dumps(error).encode(), status=400, headers=headers)
    async with open_replay_server(reply) as server:
        async with CucaClient(GEMINI, base_url=server.url, api_key="k") as client:
            with pytest.raises(HttpStatusError) as info:
                await client.generate(REQUEST)
    assert (info.value.status, info.value.message) == (400, "API key not valid.")


async def test_gemini_over_http_cut_stream_is_a_transport_error() -> None:
    async with open_replay_server(Reply(transcript("gemini/cut"))) as server:
        async with CucaClient(GEMINI, base_url=server.url, api_key="k") as client:
            with pytest.raises(TransportError):
                await client.generate(REQUEST)


SIGNED_THEN_UNSIGNED = (
    b'data: {"candidates":[{"content":{"parts":[{"text":"Signed ","thoughtSignature":"c2ln"}],'
    b'"role":"model"},"index":0}]}\r\n\r\n'
    b'data: {"candidates":[{"content":{"parts":[{"text":"then plain."}],"role":"model"},'
    b'"finishReason":"STOP","index":0}]}\r\n\r\n'
)


async def test_gemini_signed_text_stays_apart_once_collected() -> None:
    """Decode, then collect (``generate`` merges the deltas): the signed text part keeps
    its signature, and the unsigned text after it is a block of its own, so the
    assistant message replays the signature on the text it signed."""
    async with open_replay_server(Reply(SIGNED_THEN_UNSIGNED)) as server:
        async with CucaClient(GEMINI, base_url=server.url, api_key="k") as client:
            done = await client.generate(REQUEST)
    assert done.blocks == (
        Text("Signed ", signature="c2ln", provider=GEMINI),
        Text("then plain."),
    )
    sent = body(REQUEST.add_message(done.message))["contents"][-1]["parts"]
    assert sent == [{"text": "Signed ", "thoughtSignature": "c2ln"}, {"text": "then plain."}]
