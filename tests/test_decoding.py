"""What every decoder reads the same way: counts, tool-call arguments, error bodies."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from cuca import ProviderEndpoint, Text, Thinking, ToolCall, ToolCallError
from cuca.errors import (
    AuthenticationError,
    HttpContextOverflowError,
    HttpStatusError,
    JsonError,
    ProviderError,
    RateLimitError,
    ServerError,
)
from cuca.providers.anthropic.decode import AnthropicDecoder
from cuca.providers.chat.decode import ChatCompletionsDecoder
from cuca.providers.decoding import (
    Shape,
    decode_frame,
    json_body,
    stream_error,
    streamed_arguments,
)
from cuca.providers.gemini.decode import GeminiDecoder
from cuca.providers.responses.decode import ResponsesDecoder
from cuca.stages import SseEvent


def test_decoding_tool_arguments_one_rule() -> None:
    assert streamed_arguments("") == {} == streamed_arguments("  ")
    assert streamed_arguments('{"city": "Paris"}') == {"city": "Paris"}
    assert streamed_arguments('{"city": ') is None
    assert streamed_arguments("[1, 2]") is None
    assert streamed_arguments("[" * 100_000) is None  # hostile nesting


def test_decoding_json_body_unwraps_gemini_lists() -> None:
    assert json_body('[{"error": {"message": "x"}}]') == {"error": {"message": "x"}}
    assert json_body("not json") is None


@pytest.mark.parametrize("count", [True, "12", 2.0, [1], {"n": 1}, None])
def test_decoding_a_count_that_is_no_integer_is_no_count_for_gemini_and_openai(
    count: object,
) -> None:
    """The same `true` (or text, or float...) means the same for every adapter: not a
    token count of 1, and the rest of the usage is still read."""
    gemini = GeminiDecoder()
    frame = {
        "candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": count, "candidatesTokenCount": 4},
    }
    gemini.feed(SseEvent(json.dumps(frame)))
    gemini.close()
    usage = gemini.summary().usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (0, 4)

    openai = ChatCompletionsDecoder("openai")
    chunk = {"choices": [], "usage": {"prompt_tokens": count, "completion_tokens": 4}}
    openai.feed(SseEvent(json.dumps(chunk)))
    openai.feed(SseEvent("[DONE]"))
    usage = openai.summary().usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (0, 4)


def test_decoding_malformed_arguments_are_the_same_error_for_openai_and_anthropic() -> None:
    openai = ChatCompletionsDecoder("openai")
    call = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "[1]"}}
    openai.feed(SseEvent(json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})))
    stop = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    items = openai.feed(SseEvent(json.dumps(stop)))
    items += openai.feed(SseEvent("[DONE]")) + openai.close()
    assert [type(i) for i in items] == [ToolCallError]
    assert items[0].message == "malformed tool call: [1]"
    assert (items[0].tool_call_id, items[0].name, items[0].raw) == ("c1", "f", "[1]")

    anthropic = AnthropicDecoder(ProviderEndpoint.ANTHROPIC, "anthropic")
    events = [
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": "[1]"}},
        {"type": "content_block_stop", "index": 0},
    ]
    out = [item for e in events for item in anthropic.feed(SseEvent(json.dumps(e), e["type"]))]
    assert [type(i) for i in out] == [ToolCallError]
    assert out[0].message == "malformed tool call: [1]"
    assert (out[0].tool_call_id, out[0].name, out[0].raw) == ("t1", "f", "[1]")
    assert not any(isinstance(i, ToolCall) for i in out)


def _anthropic_tool_use(block: dict[str, object], *fragments: object) -> list[object]:
    """The items of one Anthropic ``tool_use`` block: its start, its input fragments, its stop."""
    start = {"type": "tool_use", "id": "t1", "name": "f", "input": {}} | block
    events: list[dict[str, object]] = [
        {"type": "content_block_start", "index": 0, "content_block": start},
        *(
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "input_json_delta", "partial_json": f}}
            for f in fragments
        ),
        {"type": "content_block_stop", "index": 0},
    ]
    decoder = AnthropicDecoder(ProviderEndpoint.ANTHROPIC, "anthropic")
    return [item for e in events for item in decoder.feed(SseEvent(json.dumps(e), str(e["type"])))]


@pytest.mark.parametrize(
    ("block", "fragments", "raw"),
    [
        ({}, ['{"a": ', 1], '{"a": 1'),  # a fragment that is not text
        ({}, [{"a": 1}], '{"a": 1}'),  # the input as an object where its text belongs
        ({"input": [1]}, [], "[1]"),  # an input that is not an object, no fragments
        ({"input": "x"}, [], '"x"'),
    ],
)
def test_decoding_anthropic_tool_input_of_the_wrong_type_is_a_tool_call_error(
    block: dict[str, object], fragments: list[object], raw: str
) -> None:
    """A call whose input came as something other than text (or an object at the start)
    is a ToolCallError showing it, never a call run with empty arguments."""
    items = _anthropic_tool_use(block, *fragments)
    assert [type(i) for i in items] == [ToolCallError]
    assert (items[0].tool_call_id, items[0].name, items[0].raw) == ("t1", "f", raw)
    assert items[0].message == f"malformed tool call: {raw}"


@pytest.mark.parametrize("name", [None, 5, ""])
def test_decoding_anthropic_tool_use_without_a_name_is_a_tool_call_error(name: object) -> None:
    items = _anthropic_tool_use({"name": name}, '{"a": 1}')
    assert [type(i) for i in items] == [ToolCallError]
    assert items[0].message == 'malformed tool call: no tool name: {"a": 1}'
    assert (items[0].tool_call_id, items[0].raw) == ("t1", '{"a": 1}')


def test_decoding_anthropic_tool_input_object_or_null_is_read() -> None:
    assert _anthropic_tool_use({"input": {"a": 1}}) == [ToolCall("t1", "f", {"a": 1})]
    assert _anthropic_tool_use({"input": None}, None, '{"a": 2}') == [ToolCall("t1", "f", {"a": 2})]


@pytest.mark.parametrize(
    ("arguments", "raw"), [([1], "[1]"), (5, "5"), (True, "true"), ({"a": 1}, None)]
)
def test_decoding_openai_arguments_that_are_not_text_are_shown_not_dropped(
    arguments: object, raw: str | None
) -> None:
    """Arguments sent as a JSON value rather than its text: an object is read (servers
    that parse it), anything else is a ToolCallError showing it, on both OpenAI wires,
    never a call run with empty arguments."""
    chat = ChatCompletionsDecoder("openai")
    call = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": arguments}}
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "stop"}]}
    from_chat = chat.feed(SseEvent(json.dumps(chunk)))

    responses = ResponsesDecoder(ProviderEndpoint.OPENAI)
    item = {"type": "function_call", "id": "fc1", "call_id": "c1", "name": "f"}
    events = [
        {"type": "response.output_item.added", "item": item},
        {"type": "response.output_item.done", "item": item | {"arguments": arguments}},
    ]
    from_responses = [i for e in events for i in responses.feed(SseEvent(json.dumps(e)))]

    for items in (from_chat, from_responses):
        if raw is None:
            assert items == [ToolCall("c1", "f", {"a": 1})]
        else:
            assert [type(i) for i in items] == [ToolCallError]
            assert (items[0].tool_call_id, items[0].name, items[0].raw) == ("c1", "f", raw)


def test_decoding_openai_choice_index_null_is_the_first_choice() -> None:
    """`null` where a field is optional means absent: a choice whose index is null (or
    absent) is choice 0, its text is read; choice 1 is not."""
    decoder = ChatCompletionsDecoder("openai")
    frames = [
        {"choices": [{"index": None, "delta": {"content": "a"}}]},
        {"choices": [{"delta": {"content": "b"}}, {"index": 1, "delta": {"content": "x"}}]},
    ]
    items = [item for f in frames for item in decoder.feed(SseEvent(json.dumps(f)))]
    assert items == [Text("a"), Text("b")]


def test_decoding_null_is_absent_and_costs_no_drop() -> None:
    """`null` in an optional field is the field absent, never a wrongly typed value: a
    frame of 20 Gemini parts with `"thought": null` is 20 texts (20 dropped values would
    refuse it), an Anthropic block of nulls is a text block."""
    gemini = GeminiDecoder()
    parts = [{"text": str(n), "thought": None, "thoughtSignature": None} for n in range(20)]
    frame = {"candidates": [{"content": {"parts": parts}, "finishReason": None}]}
    assert gemini.feed(SseEvent(json.dumps(frame))) == [Text(str(n)) for n in range(20)]

    anthropic = AnthropicDecoder(ProviderEndpoint.ANTHROPIC, "anthropic")
    block = {"type": "text", "id": None, "name": None, "text": "hi", "data": None}
    start = {"type": "content_block_start", "index": None, "content_block": block}
    assert anthropic.feed(SseEvent(json.dumps(start), "content_block_start")) == [Text("hi")]


class _Inner(Shape, rename="camel"):
    text_2: str | None = None


class _Outer(Shape):
    items: list[_Inner] | None = None
    count: int | None = None


def test_decoding_msgspec_names_the_wrong_value_in_the_form_decode_frame_reads() -> None:
    """decode_frame finds the value to drop in msgspec's message: if a msgspec release
    words it otherwise, this fails first (and every wrongly typed value would refuse its
    frame)."""
    frame = '{"items": [{"text2": "a"}, {"text2": 5}], "count": true}'
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.json.decode(frame, type=_Outer)
    assert str(info.value) == "Expected `str | null`, got `int` - at `$.items[1].text2`"
    decoded = decode_frame(msgspec.json.Decoder(_Outer), frame, "openai")
    assert decoded == _Outer([_Inner("a"), _Inner(None)], None)


def test_decoding_frame_wrong_type_counts_as_absent_and_the_rest_is_read() -> None:
    """A value of the wrong type is as if the vendor had not sent it: the text of the
    frame still arrives, the number in `content` and the `true` count do not."""
    decoder = ChatCompletionsDecoder("openai")
    frames = [
        {"choices": [{"index": 0, "delta": {"content": 5, "reasoning": "hm"}}]},
        {"choices": [7, {"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": [1]}},
    ]
    items = [item for f in frames for item in decoder.feed(SseEvent(json.dumps(f)))]
    assert [type(i) for i in items] == [Thinking, Text]
    assert (items[0].text, items[1].text) == ("hm", "hi")
    decoder.feed(SseEvent("[DONE]"))
    usage = decoder.summary().usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (3, 0)


def test_decoding_frame_number_out_of_range_is_one_value_not_the_frame() -> None:
    """`1e400` is JSON (`json.loads` reads it as infinity): in a count it is no count, as
    any float is, and the text of the frame still arrives."""
    decoder = ChatCompletionsDecoder("openai")
    frame = '{"choices": [{"index": 0, "delta": {"content": "hi"}}], "x": -1e999,'
    frame += ' "usage": {"prompt_tokens": 1e400, "completion_tokens": 4}}'
    items = decoder.feed(SseEvent(frame))
    assert items == [Text("hi")]
    decoder.feed(SseEvent("[DONE]"))
    usage = decoder.summary().usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (0, 4)


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        ('{"choices": [', JsonError, "openai sent a frame that is not JSON"),
        ('{"a": NaN}', JsonError, "openai sent a frame that is not JSON"),
        ('{"a": 1} {"b": 2}', JsonError, "openai sent a frame that is not JSON"),
        # a wrongly typed value first: the typed decoding stops before the text is broken
        ('{"choices": 5, "usage": [', JsonError, "openai sent a frame that is not JSON"),
        ('{"choices": 5, "usage": NaN}', JsonError, "openai sent a frame that is not JSON"),
        ("[" * 5000 + "]" * 5000, JsonError, "not JSON"),
        ("[1, 2]", ProviderError, "unexpected frame (Expected `object`, got `array`)"),
        ('"text"', ProviderError, "unexpected frame (Expected `object`, got `str`)"),
    ],
)
def test_decoding_frame_not_json_or_not_an_object_is_a_typed_error(
    data: str, error: type[Exception], message: str
) -> None:
    """Never a msgspec exception: text that is not JSON is a JsonError, JSON that is not
    the chunk object a ProviderError, each naming the provider and showing the frame."""
    with pytest.raises(error) as info:
        ChatCompletionsDecoder("openai").feed(SseEvent(data))
    assert message in str(info.value)
    assert not isinstance(info.value, msgspec.MsgspecError)


def test_decoding_frame_full_of_wrong_types_is_refused_in_bounded_time() -> None:
    """A hostile frame of 100,000 wrongly typed choices: a ProviderError, not 100,000
    passes over the frame."""
    frame = json.dumps({"choices": [1] * 100_000})
    with pytest.raises(ProviderError, match=r"over 16 values of the wrong type"):
        ChatCompletionsDecoder("openai").feed(SseEvent(frame))


def _anthropic(kind: str, message: str = "m") -> str:
    error = {"type": "error", "error": {"type": kind, "message": message}}
    return "event: error\ndata: " + json.dumps(error)


def _chat(**error: object) -> str:
    return "data: " + json.dumps({"error": {"message": "m", **error}})


def _gemini(code: int, status: str) -> str:
    return "data: " + json.dumps({"error": {"code": code, "message": "m", "status": status}})


FAILED = {
    "type": "response.failed",
    "response": {"error": {"code": "server_error", "message": "m"}},
}

# (decoder, its in-stream error frame, the class and status the user gets)
IN_STREAM_ERRORS = [
    ("anthropic", _anthropic("overloaded_error"), ServerError, 529),
    ("anthropic", _anthropic("api_error"), ServerError, 500),
    # Anthropic's errors page: 504 timeout_error, 402 billing_error (wire.md 8.4 lists both)
    ("anthropic", _anthropic("timeout_error"), ServerError, 504),
    ("anthropic", _anthropic("billing_error"), HttpStatusError, 402),
    ("anthropic", _anthropic("rate_limit_error"), RateLimitError, 429),
    ("anthropic", _anthropic("invalid_request_error"), HttpStatusError, 400),
    ("anthropic", _anthropic("permission_error"), AuthenticationError, 403),
    (
        "anthropic",
        _anthropic("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"),
        HttpContextOverflowError,
        400,
    ),
    (
        "openai",
        _chat(type="invalid_request_error", code="context_length_exceeded"),
        HttpContextOverflowError,
        400,
    ),
    ("openai", _chat(type="server_error", code=None), ServerError, 500),
    ("openai", _chat(type="tokens", code="rate_limit_exceeded"), RateLimitError, 429),
    ("openai", _chat(type="BadRequestError", code=400), HttpStatusError, 400),  # vLLM
    ("openai", _chat(type="unavailable_error", code=503), ServerError, 503),  # llama.cpp
    # LiteLLM's proxy: the status as a string, "type" often the string "None"
    ("openai", _chat(type="None", param="None", code="429"), RateLimitError, 429),
    ("openai", _chat(type="internal_server_error", code="500"), ServerError, 500),
    (
        "responses",
        'event: error\ndata: {"type":"error","code":"rate_limit_exceeded","message":"m"}',
        RateLimitError,
        429,
    ),
    ("responses", "data: " + json.dumps(FAILED), ServerError, 500),
    ("gemini", _gemini(429, "RESOURCE_EXHAUSTED"), RateLimitError, 429),
    ("gemini", _gemini(503, "UNAVAILABLE"), ServerError, 503),
]


def _new_decoder(name: str) -> Any:
    if name == "anthropic":
        return AnthropicDecoder(ProviderEndpoint.ANTHROPIC, "anthropic")
    if name == "openai":
        return ChatCompletionsDecoder("openai")
    if name == "responses":
        return ResponsesDecoder(ProviderEndpoint.OPENAI)
    return GeminiDecoder()


def _event(text: str) -> SseEvent:
    fields = dict(line.split(": ", 1) for line in text.split("\n"))
    return SseEvent(fields["data"], fields.get("event", "message"))


@pytest.mark.parametrize(("name", "frame", "kind", "status"), IN_STREAM_ERRORS)
def test_decoding_in_stream_errors_have_the_kind_of_their_status(
    name: str, frame: str, kind: type[HttpStatusError], status: int
) -> None:
    """Issue 29 §2: an error inside a 200 stream is raised as the class its HTTP status
    would have had (code that retries on ServerError retries an overload either way)."""
    event = _event(frame)
    with pytest.raises(HttpStatusError) as info:
        _new_decoder(name).feed(event)
    assert type(info.value) is kind
    assert (info.value.status, info.value.body, info.value.in_stream) == (status, event.data, True)
    assert "m" in info.value.message
    # str says where it came from, an overflow too (it said "http status 400: ..." alone)
    assert str(info.value).startswith(f"http status {status} (in the ")


@pytest.mark.parametrize(
    "error",
    [
        {"message": "m"},
        {"message": "m", "type": "strange"},
        "m",
        {"code": 200},
        {"code": "200"},
        {"code": "4290"},
        {"code": "٤٢٩"},  # digits, but not ASCII ones
    ],
)
def test_decoding_in_stream_error_of_no_known_kind_is_a_provider_error(error: object) -> None:
    raised = stream_error("openai", "m", error, "{}")
    assert type(raised) is ProviderError
    assert raised == ProviderError("openai", "m")


@pytest.mark.parametrize(
    ("name", "error", "limit", "requested"),
    [
        ("openai", {"type": "exceed_context_size_error", "code": 400, "n_ctx": 512,
                    "n_prompt_tokens": 631}, 512, 631),
        ("openai", {"type": "invalid_request_error", "code": "context_length_exceeded"},
         None, None),
        ("anthropic", {"type": "invalid_request_error",
                       "message": "prompt is too long: 208310 tokens > 200000 maximum"},
         200000, 208310),
    ],
)
def test_decoding_200_json_error_that_the_prompt_does_not_fit_is_an_overflow(
    name: str, error: dict[str, Any], limit: int | None, requested: int | None
) -> None:
    """docs/errors.md lists a 200 JSON body holding {"error": ...} among the errors inside
    the stream, raised as their status would be: one that says the prompt does not fit
    is an HttpContextOverflowError with the window and the prompt's size, as the 400
    would have been (it was a plain HttpStatusError), whether the request streamed (a
    server that ignored stream: true) or not."""
    from cuca.providers.whole_response import WholeResponseDecoder
    from cuca.stages.framing import JSON_BODY

    body = json.dumps({"error": {"message": "m", **error}})
    streamed = _new_decoder(name)
    whole = WholeResponseDecoder(_new_decoder(name), lambda document: [], name)
    for decoder in (streamed, whole):
        with pytest.raises(HttpContextOverflowError) as info:
            decoder.feed(SseEvent(body, JSON_BODY))
        assert (info.value.status, info.value.body, info.value.in_stream) == (400, body, True)
        assert (info.value.limit, info.value.requested) == (limit, requested)
