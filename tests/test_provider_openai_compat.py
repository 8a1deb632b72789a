"""The ``/chat/completions`` adapter: OpenAI, vLLM and LM Studio.

Transcripts under ``tests/transcripts/`` are fed through the SSE parser under every
chunking Hypothesis finds, then served over loopback by the replay server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.transcripts import Decoded, decode_chunks, in_stream, transcript

from cuca import (
    ConfigurationError,
    CucaClient,
    HttpStatusError,
    ImageBase64,
    JsonError,
    MessageRole,
    OpenAiThinkingParams,
    PromptCacheUsage,
    ProviderEndpoint,
    ProviderError,
    ServerError,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    TokenUsage,
    ToolCall,
    ToolCallError,
    ToolResult,
    TransportError,
    UnifiedMessage,
    UnifiedRequest,
)
from cuca.providers.base import ClientSettings, Item
from cuca.providers.chat.encode import ChatCompletionsDecoder, OpenAiCompatAdapter
from cuca.providers.chat.family import make_chat
from cuca.providers.registry import adapter_for
from cuca.testing import Reply, chunk_sizes, chunkings, open_replay_server

KEY = "sk-test-secret-0123456789"

CALL_A = "call_c91SqDXlYFuETYv8mUHzz6pp"
EDINBURGH = {"city": "Edinburgh", "country": "UK", "units": "c"}


def texts(*parts: str) -> list[Item]:
    return [Text(p) for p in parts]


def thoughts(*parts: str, provider: ProviderEndpoint) -> list[Item]:
    """Thinking deltas, each tagged with the endpoint that produced them."""
    return [Thinking(p, provider=provider) for p in parts]


# name -> (items, error, usage, cache, finish_reason)
EXPECTED: dict[str, tuple[list[Item], Any, Any, Any, str | None]] = {
    "openai/text": (
        texts("I'm", " unable", " to", " provide", " real", "-time", " weather", " updates", "."),
        None,
        TokenUsage(1117, 46, 0),
        PromptCacheUsage(1024, 0),
        "stop",
    ),
    "openai/tool_call": (
        [ToolCall(CALL_A, "GetWeatherArgs", EDINBURGH)],
        None,
        TokenUsage(76, 24, 0),
        None,
        "tool_calls",
    ),
    "openai/parallel_tool_calls": (
        [
            ToolCall("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs", EDINBURGH),
            ToolCall(
                "call_DNYTawLBoN8fj3KN6qU9N1Ou",
                "get_stock_price",
                {"ticker": "AAPL", "exchange": "NASDAQ"},
            ),
        ],
        None,
        TokenUsage(149, 60, 0),
        None,
        "tool_calls",
    ),
    "openai/error": (
        texts("The"),
        in_stream(
            "openai/error",
            500,  # "type": "server_error"
            "The server had an error processing your request. Sorry about that! You can retry"
            " your request, or contact us through our help center at help.openai.com if you"
            " keep seeing this error.",
        ),
        None,
        None,
        None,
    ),
    "vllm/reasoning_tool_call": (
        [
            *thoughts("The user wants", " the weather in Paris.", provider=ProviderEndpoint.VLLM),
            ToolCall("chatcmpl-tool-5b1e7f0c9d2a4e6b", "get_weather", {"city": "Paris"}),
        ],
        None,
        TokenUsage(180, 51, None),
        None,
        "tool_calls",
    ),
    "vllm/reasoning_both_fields": (
        [*thoughts("Two plus two", " is four.", provider=ProviderEndpoint.VLLM), Text("4")],
        None,
        TokenUsage(31, 8, None),
        PromptCacheUsage(16, 0),
        "stop",
    ),
    "vllm/error": (
        [],
        in_stream(
            "vllm/error",
            400,  # "code": 400
            "The decoder prompt (length 9000) is longer than the maximum model length of 8192.",
        ),
        None,
        None,
        None,
    ),
    "lm_studio/reasoning": (
        [
            *thoughts(
                "Ok",
                "ay",
                ",",
                " the",
                " user",
                " says",
                " hi",
                ".",
                provider=ProviderEndpoint.LM_STUDIO,
            ),
            *texts("Hello", "!", " How", " can", " I", " help", "?"),
        ],
        None,
        TokenUsage(9, 15, None),
        None,
        "stop",
    ),
    "lm_studio/gpt_oss_tool_call": (
        [
            *thoughts("Need", " the tool.", provider=ProviderEndpoint.LM_STUDIO),
            ToolCall("814890118", "get_current_weather", {"location": "San Francisco"}),
        ],
        None,
        TokenUsage(88, 21, None),
        None,
        "tool_calls",
    ),
}


def _decoder_for(name: str) -> ChatCompletionsDecoder:
    return ChatCompletionsDecoder(name.split("/")[0])


def _check(name: str, decoded: Decoded) -> None:
    items, error, usage, cache, finish = EXPECTED[name]
    assert decoded.items == items
    assert decoded.error == error
    assert decoded.summary.usage == usage
    assert decoded.summary.prompt_cache_usage == cache
    assert decoded.summary.finish_reason == finish


# -- decoding transcripts ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_decoder_transcript_in_one_chunk(name: str) -> None:
    _check(name, decode_chunks(_decoder_for(name), [transcript(name)]))


@pytest.mark.parametrize("name", sorted(EXPECTED))
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_decoder_transcript_any_chunking(name: str, data: st.DataObject) -> None:
    chunks = data.draw(chunkings(transcript(name)))
    _check(name, decode_chunks(_decoder_for(name), chunks))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_decoder_transcript_byte_by_byte(name: str) -> None:
    body = transcript(name)
    _check(name, decode_chunks(_decoder_for(name), [body[i : i + 1] for i in range(len(body))]))


# -- decoder behaviours --------------------------------------------------------------


def frame(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps({"choices": choices, **extra}).encode() + b"\n\n"


def call(index: int | None, args: Any = None, **fields: Any) -> dict[str, Any]:
    function: dict[str, Any] = {}
    if "name" in fields:
        function["name"] = fields.pop("name")
    if args is not None:
        function["arguments"] = args
    out: dict[str, Any] = {"function": function, **fields}
    if index is not None:
        out["index"] = index
    return {"tool_calls": [out]}


DONE = b"data: [DONE]\n\n"


def decode(*frames: bytes, provider: str = "openai") -> Decoded:
    return decode_chunks(ChatCompletionsDecoder(provider), [b"".join(frames)])


def test_decoder_empty_content_gives_no_block() -> None:
    out = decode(frame({"role": "assistant", "content": ""}), frame({"content": None}), DONE)
    assert out.items == []
    assert out.error is None


def test_decoder_reasoning_under_either_name() -> None:
    out = decode(frame({"reasoning": "a"}), frame({"reasoning_content": "b"}), DONE)
    assert out.items == thoughts("a", "b", provider=ProviderEndpoint.OPENAI)


def test_decoder_reasoning_mirrored_in_both_names_is_one_block() -> None:
    out = decode(frame({"reasoning": "a", "reasoning_content": "a"}), DONE)
    assert out.items == thoughts("a", provider=ProviderEndpoint.OPENAI)


def test_decoder_reasoning_before_text_in_one_delta() -> None:
    out = decode(frame({"reasoning_content": "think", "content": "say"}), DONE)
    assert out.items == [Thinking("think", provider=ProviderEndpoint.OPENAI), Text("say")]


@pytest.mark.parametrize("args", ["", "{}", " { } ", None])
def test_decoder_tool_call_without_arguments_is_empty_object(args: str | None) -> None:
    out = decode(frame(call(0, args, id="c1", name="now")), frame({}, "tool_calls"), DONE)
    assert out.items == [ToolCall("c1", "now", {})]


def test_decoder_tool_call_arguments_all_at_the_end() -> None:
    out = decode(
        frame(call(0, "", id="c1", type="function", name="f")),
        frame(call(0, '{"x": [1, 2]}'), "tool_calls"),
        DONE,
    )
    assert out.items == [ToolCall("c1", "f", {"x": [1, 2]})]


def test_decoder_tool_call_id_repeated_on_every_fragment() -> None:
    out = decode(
        frame(call(0, '{"a"', id="c1", name="f")),
        frame(call(0, ": 1}", id="c1", name="f")),
        frame({}, "tool_calls"),
        DONE,
    )
    assert out.items == [ToolCall("c1", "f", {"a": 1})]


def test_decoder_tool_calls_merge_by_index_not_id() -> None:
    # two parallel calls to the same function with the same (bogus) id stay two calls
    out = decode(
        frame(call(0, '{"n": 1}', id="same", name="f")),
        frame(call(1, '{"n": 2}', id="same", name="f")),
        frame({}, "tool_calls"),
        DONE,
    )
    assert out.items == [ToolCall("same", "f", {"n": 1}), ToolCall("same", "f", {"n": 2})]


def test_decoder_tool_calls_emitted_in_index_order() -> None:
    out = decode(
        frame(call(1, "{}", id="b", name="g")),
        frame(call(0, "{}", id="a", name="f")),
        frame({}, "tool_calls"),
        DONE,
    )
    assert [c.id for c in out.items if isinstance(c, ToolCall)] == ["a", "b"]


def test_decoder_tool_call_without_index_follows_ids() -> None:
    out = decode(
        frame(call(None, '{"n":', id="a", name="f")),
        frame(call(None, " 1}")),
        frame(call(None, "{}", id="b", name="g")),
        frame({}, "tool_calls"),
        DONE,
    )
    assert out.items == [ToolCall("a", "f", {"n": 1}), ToolCall("b", "g", {})]


def test_decoder_parallel_calls_all_on_index_zero_stay_apart() -> None:
    # servers that send every parallel call on "index": 0, each with its own id and name:
    # the second call's arguments were appended to the first's ({"city": ...}{"tz": ...})
    out = decode(
        frame(call(0, "", id="a", name="weather")),
        frame(call(0, '{"city": "Paris"}')),
        frame(call(0, "", id="b", name="clock")),
        frame(call(0, '{"tz": "Europe/Paris"}')),
        frame({}, "tool_calls"),
        DONE,
    )
    assert out.items == [
        ToolCall("a", "weather", {"city": "Paris"}),
        ToolCall("b", "clock", {"tz": "Europe/Paris"}),
    ]


def test_decoder_parallel_calls_one_id_for_every_call_a_new_name_starts_a_call() -> None:
    # issue 29 §1: "a name while the call at that index already has another starts a new
    # call", also when the server gave every call the same id (the clock call's arguments
    # were appended to the weather call's: one ToolCallError, the second call lost)
    out = decode(
        frame(call(0, "", id="call_0", name="weather")),
        frame(call(0, '{"city": "Paris"}', id="call_0")),
        frame(call(0, "", id="call_0", name="clock")),
        frame(call(0, '{"tz": "Europe/Paris"}', id="call_0")),
        frame({}, "tool_calls"),
        DONE,
    )
    assert out.items == [
        ToolCall("call_0", "weather", {"city": "Paris"}),
        ToolCall("call_0", "clock", {"tz": "Europe/Paris"}),
    ]


def test_decoder_parallel_calls_a_new_name_without_ids_starts_a_call() -> None:
    out = decode(
        frame(call(0, '{"n": 1}', name="f")),
        frame(call(0, '{"m": 2}', name="g")),
        frame({}, "tool_calls"),
        DONE,
    )
    assert out.items == [ToolCall("call_0", "f", {"n": 1}), ToolCall("call_1", "g", {"m": 2})]


_CALLS = st.lists(
    st.tuples(
        st.sampled_from(["f", "g"]),
        st.dictionaries(st.sampled_from("abc"), st.integers() | st.text(max_size=4), max_size=3),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=examples(150), deadline=None)
@given(
    calls=_CALLS,
    indexes=st.sampled_from(["own", "zero", "none"]),
    ids_repeated=st.booleans(),
    names_repeated=st.booleans(),
    data=st.data(),
)
def test_decoder_parallel_calls_any_index_id_and_chunking(
    calls: list[tuple[str, dict[str, Any]]],
    indexes: str,
    ids_repeated: bool,
    names_repeated: bool,
    data: st.DataObject,
) -> None:
    """Each call's arguments cut at random points, the calls' fragments interleaved
    wherever the server could tell them apart (by their own index, or by the id repeated
    on every fragment; else one call after another), the stream cut at random bytes:
    every call comes out whole, none appended to another."""
    fragments: list[list[dict[str, Any]]] = []
    for n, (name, arguments) in enumerate(calls):
        text = json.dumps(arguments)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=3)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        index = {"own": n, "zero": 0, "none": None}[indexes]
        own = []
        for k, piece in enumerate(pieces):
            fields: dict[str, Any] = {}
            if k == 0 or ids_repeated:
                fields["id"] = f"call-{n}"
            if k == 0 or names_repeated:
                fields["name"] = name
            own.append(call(index, piece, **fields))
        fragments.append(own)
    if indexes == "own" or ids_repeated:  # interleave, each call's fragments in order
        order = data.draw(st.permutations([n for n, own in enumerate(fragments) for _ in own]))
    else:
        order = [n for n, own in enumerate(fragments) for _ in own]
    frames = [frame(fragments[n].pop(0)) for n in order]
    body = b"".join([*frames, frame({}, "tool_calls"), DONE])
    chunks = data.draw(chunkings(body, max_chunks=12))
    out = decode_chunks(ChatCompletionsDecoder("openai"), chunks)
    # in index order; calls that share an index in the order they began
    first = sorted(range(len(calls)), key=lambda n: n if indexes == "own" else order.index(n))
    assert out.error is None
    assert out.items == [ToolCall(f"call-{n}", *calls[n]) for n in first]


def test_decoder_tool_call_without_id_gets_one() -> None:
    out = decode(frame(call(0, "{}", name="f")), frame({}, "tool_calls"), DONE)
    assert out.items == [ToolCall("call_0", "f", {})]


def test_decoder_tool_call_arguments_as_object() -> None:
    out = decode(frame(call(0, {"k": "v"}, id="a", name="f")), frame({}, "tool_calls"), DONE)
    assert out.items == [ToolCall("a", "f", {"k": "v"})]


DEEP = '{"a": ' + "[" * 10000 + "]" * 10000 + "}"


@pytest.mark.parametrize(
    "args",
    ['{"city": "Par', "[1, 2]", '"text"', "null", DEEP],
    ids=["truncated", "array", "string", "null", "too_deep"],
)
def test_decoder_malformed_tool_call_is_an_item(args: str) -> None:
    out = decode(
        frame(call(0, args, id="bad", name="f")),
        frame(call(1, '{"ok": true}', id="good", name="g")),
        frame({}, "tool_calls"),
        frame(None, usage={"prompt_tokens": 3, "completion_tokens": 4}),
        DONE,
    )
    assert out.items == [
        ToolCallError(
            "openai", f"malformed tool call: {args}", tool_call_id="bad", name="f", raw=args
        ),
        ToolCall("good", "g", {"ok": True}),
    ]
    assert isinstance(out.items[0], ProviderError)  # what code written before still catches
    assert out.error is None
    assert out.summary.usage == TokenUsage(3, 4)


def test_decoder_tool_call_without_name_is_malformed() -> None:
    out = decode(frame(call(0, "{}", id="a")), frame({}, "tool_calls"), DONE)
    assert len(out.items) == 1
    assert out.items[0] == ToolCallError(
        "openai", "malformed tool call: no function name: {}", tool_call_id="a", raw="{}"
    )


def test_decoder_tool_calls_flushed_at_done_without_finish() -> None:
    out = decode(frame(call(0, '{"a": 1}', id="a", name="f")), DONE)
    assert out.items == [ToolCall("a", "f", {"a": 1})]
    assert out.summary.finish_reason is None


def test_decoder_eof_after_finish_emits_calls_without_error() -> None:
    out = decode(frame(call(0, '{"a": 1}', id="a", name="f")), frame({}, "tool_calls"))
    assert out.items == [ToolCall("a", "f", {"a": 1})]
    assert out.error is None
    assert out.summary.finish_reason == "tool_calls"


def test_decoder_eof_before_finish_is_transport_error() -> None:
    out = decode(frame({"content": "Hel"}), frame(call(0, "{}", id="a", name="f")))
    assert out.items == texts("Hel")
    assert isinstance(out.error, TransportError)
    assert "before the turn was complete" in str(out.error)


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e[1] is None))
@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_decoder_cut_transcript_never_loses_silently(name: str, data: st.DataObject) -> None:
    body = transcript(name)
    done_at = body.index(DONE)
    cut = data.draw(st.integers(0, done_at))
    out = decode_chunks(_decoder_for(name), [body[:cut]])
    finish_seen = b'"finish_reason":"' in body[:cut].rsplit(b"\n\n", 1)[0]
    assert (out.error is None) == finish_seen
    if out.error is not None:
        assert isinstance(out.error, TransportError)


def test_decoder_usage_null_and_usage_on_finish_chunk() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 128,
        "prompt_cache_hit_tokens": 7,
        "prompt_cache_miss_tokens": 3,
        "completion_tokens_details": {"reasoning_tokens": 94},
    }
    out = decode(frame({"content": "x"}, usage=None), frame({}, "stop", usage=usage), DONE)
    assert out.summary.usage == TokenUsage(10, 128, 94)
    assert out.summary.prompt_cache_usage == PromptCacheUsage(7, 0)


def test_decoder_usage_cache_write_tokens() -> None:
    usage = {
        "prompt_tokens": 5,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 3},
    }
    out = decode(frame({}, "stop"), frame(None, usage=usage), DONE)
    assert out.summary.prompt_cache_usage == PromptCacheUsage(2, 3)


def test_decoder_usage_chunk_without_choices_key() -> None:
    out = decode(frame({}, "stop"), b'data: {"usage": {"prompt_tokens": 1}}\n\n', DONE)
    assert out.summary.usage == TokenUsage(1, 0)


def test_decoder_error_frame_ends_the_turn() -> None:
    error = {"error": {"message": "overloaded", "type": "server_error"}}
    out = decode(frame({"content": "a"}), b"data: " + json.dumps(error).encode() + b"\n\n")
    assert out.items == texts("a")
    assert out.error == ServerError(500, json.dumps(error), "overloaded")  # "server_error"
    assert isinstance(out.error, ServerError) and out.error.in_stream


def test_decoder_error_frame_with_string_error() -> None:
    out = decode(b'data: {"error": "model unloaded"}\n\n', provider="lm_studio")
    assert out.error == ProviderError("lm_studio", "model unloaded")


def test_decoder_frame_not_json_is_json_error() -> None:
    out = decode(frame({"content": "a"}), b"data: {not json\n\n")
    assert out.items == texts("a")
    assert isinstance(out.error, JsonError)


def test_decoder_keep_alive_comments_ignored() -> None:
    out = decode(b": keep-alive\n\n", frame({"content": "a"}), b": ping\n\n", frame({}, "stop"))
    assert out.items == texts("a")
    assert out.error is None


def test_decoder_done_sets_finished() -> None:
    decoder = ChatCompletionsDecoder("openai")
    decode_chunks(decoder, [frame({"content": "a"})])
    assert not decoder.finished
    decoder = ChatCompletionsDecoder("openai")
    decode_chunks(decoder, [frame({"content": "a"}) + DONE + frame({"content": "late"})])
    assert decoder.finished


def test_decoder_other_choices_ignored() -> None:
    other = {"choices": [{"index": 1, "delta": {"content": "n=2"}, "finish_reason": None}]}
    out = decode(b"data: " + json.dumps(other).encode() + b"\n\n", frame({"content": "a"}), DONE)
    assert out.items == texts("a")


# -- encoding ------------------------------------------------------------------------

FACTORIES = {
    "openai": (make_chat, ProviderEndpoint.OPENAI, "https://api.openai.com/v1"),
    "vllm": (make_chat, ProviderEndpoint.VLLM, "http://127.0.0.1:8000/v1"),
    "lm_studio": (make_chat, ProviderEndpoint.LM_STUDIO, "http://127.0.0.1:1234/v1"),
}
MAX_TOKENS_FIELD = {
    "openai": "max_completion_tokens",
    "vllm": "max_tokens",
    "lm_studio": "max_tokens",
}


def adapter(name: str, base_url: str | None = None, api_key: str | None = KEY) -> Any:
    factory, endpoint, _ = FACTORIES[name]
    return factory(ClientSettings(endpoint, base_url, api_key))


def simple_request(**changes: Any) -> UnifiedRequest:
    request = UnifiedRequest.new("m-1").add_system_message("Be brief.").add_user_message("Hi")
    for key, value in changes.items():
        request = getattr(request, f"set_{key}")(value)
    return request


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_encode_default_url_and_registry(name: str) -> None:
    _, endpoint, base = FACTORIES[name]
    built = adapter_for(ClientSettings(endpoint, None, KEY))
    assert isinstance(built, OpenAiCompatAdapter)
    assert built.encode(simple_request()).url == f"{base}/chat/completions"


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://h:9/v1", "http://h:9/v1/chat/completions"),
        ("http://h:9/v1/", "http://h:9/v1/chat/completions"),
        ("http://h:9/proxy/openai", "http://h:9/proxy/openai/chat/completions"),
    ],
)
def test_encode_base_url_override(name: str, base: str, url: str) -> None:
    assert adapter(name, base).encode(simple_request()).url == url


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_encode_minimal_body(name: str) -> None:
    body = adapter(name).encode(simple_request()).body
    assert body == {
        "model": "m-1",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_encode_temperature_and_max_tokens_when_set(name: str) -> None:
    body = adapter(name).encode(simple_request(temperature=0.25, max_tokens=64)).body
    assert body["temperature"] == 0.25
    assert body[MAX_TOKENS_FIELD[name]] == 64
    assert {"max_tokens", "max_completion_tokens"} & set(body) == {MAX_TOKENS_FIELD[name]}


EFFORTS = [
    (ThinkingConfig.on(ThinkingEffort.MINIMAL), "minimal"),
    (ThinkingConfig.on(ThinkingEffort.LOW), "low"),
    (ThinkingConfig.on(ThinkingEffort.MEDIUM), "medium"),
    (ThinkingConfig.on(ThinkingEffort.HIGH), "high"),
    (ThinkingConfig.on(ThinkingEffort.XHIGH), "high"),
    (ThinkingConfig(True, ThinkingEffort.LOW, OpenAiThinkingParams("xhigh")), "xhigh"),
    (ThinkingConfig(True, None, OpenAiThinkingParams("none")), "none"),
    (ThinkingConfig.on(None), None),
    (ThinkingConfig.off(), None),
    (ThinkingConfig(False, ThinkingEffort.HIGH, OpenAiThinkingParams("high")), None),
    (None, None),
]


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize(("thinking", "effort"), EFFORTS)
def test_encode_reasoning_effort(
    name: str, thinking: ThinkingConfig | None, effort: str | None
) -> None:
    body = adapter(name).encode(simple_request(thinking=thinking)).body
    assert body.get("reasoning_effort") == effort
    assert "thinking" not in body


def test_encode_system_and_user_text_blocks_joined_with_newline() -> None:
    request = (
        UnifiedRequest.new("m")
        .add_system_message([Text("a"), Text("b")])
        .add_user_message([Text("c"), Text("d")])
    )
    messages = adapter("vllm").encode(request).body["messages"]
    assert messages == [{"role": "system", "content": "a\nb"}, {"role": "user", "content": "c\nd"}]


def test_encode_user_images_as_content_parts() -> None:
    request = UnifiedRequest.new("m").add_user_message(
        [ImageBase64("image/png", "iVBORw0KGgo="), Text("What is this?")]
    )
    messages = adapter("openai").encode(request).body["messages"]
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "text", "text": "What is this?"},
            ],
        }
    ]


def tool_round_trip() -> UnifiedRequest:
    """Seed 004: an assistant turn that reasoned and called a tool, then the result."""
    return (
        UnifiedRequest.new("m")
        .add_user_message("What is the weather in Rome?")
        .add_assistant_message(
            [
                Thinking("The user asks about Rome."),
                Thinking(" I need get_weather."),
                ToolCall("call_abc123", "get_weather", {"city": "Rome"}),
            ]
        )
        .add_tool_result("call_abc123", "12C, rain")
        .add_tool("get_weather", "Get the weather", {"type": "object"})
    )


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_encode_interleaved_thinking_tool_round_trip(name: str) -> None:
    body = adapter(name).encode(tool_round_trip()).body
    assert body["messages"] == [
        {"role": "user", "content": "What is the weather in Rome?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "The user asks about Rome. I need get_weather.",
            "tool_calls": [
                {
                    "id": "call_abc123",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc123", "content": "12C, rain"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the weather",
                "parameters": {"type": "object"},
            },
        }
    ]


def test_encode_assistant_text_and_thinking_without_calls() -> None:
    request = UnifiedRequest.new("m").add_assistant_message(
        [Thinking("hm"), Text("Hel"), Text("lo"), Thinking("x", "sig", redacted=True)]
    )
    messages = adapter("vllm").encode(request).body["messages"]
    assert messages == [{"role": "assistant", "content": "Hello", "reasoning_content": "hm"}]


def test_encode_tool_message_with_several_results() -> None:
    message = UnifiedMessage(
        MessageRole.TOOL, (ToolResult("a", "1"), ToolResult("b", "2", is_error=True))
    )
    request = UnifiedRequest.new("m").add_message(message)
    assert adapter("vllm").encode(request).body["messages"] == [
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
    ]


def test_encode_tool_message_with_text_content() -> None:
    message = UnifiedMessage(MessageRole.TOOL, (Text("42"),), tool_call_id="c9")
    request = UnifiedRequest.new("m").add_message(message)
    assert adapter("vllm").encode(request).body["messages"] == [
        {"role": "tool", "tool_call_id": "c9", "content": "42"}
    ]


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_encode_bearer_header_when_key_set(name: str) -> None:
    headers = adapter(name).encode(simple_request()).headers
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["content-type"] == "application/json"


@pytest.mark.parametrize("name", ["vllm", "lm_studio"])
def test_encode_no_key_no_header(name: str) -> None:
    headers = adapter(name, api_key=None).encode(simple_request()).headers
    assert "authorization" not in {h.lower() for h in headers}


def test_encode_openai_without_key_fails_before_io() -> None:
    with pytest.raises(ConfigurationError, match="requires an API key"):
        adapter("openai", api_key=None).encode(simple_request())


def test_encode_openai_protocol_elsewhere_needs_no_key() -> None:
    request = adapter("openai", "http://127.0.0.1:4000/v1", api_key=None).encode(simple_request())
    assert "authorization" not in request.headers


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_encode_key_never_in_repr(name: str) -> None:
    built = adapter(name)
    settings = ClientSettings(FACTORIES[name][1], None, KEY)
    for obj in (built, built.encode(simple_request()), settings):
        assert KEY not in repr(obj)
        assert KEY not in str(obj)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}',
            "Incorrect API key provided",
        ),
        (
            '{"error": "Unexpected endpoint or method. (GET /v1/nope)"}',
            "Unexpected endpoint or method. (GET /v1/nope)",
        ),
        ('{"object": "error", "message": "model not found", "code": 404}', "model not found"),
        ('{"detail": "Not Found"}', "Not Found"),
        ("<html>bad gateway</html>", None),
        ("[]", None),
    ],
)
def test_error_message_extracts_vendor_text(body: str, message: str | None) -> None:
    assert adapter("openai").error_message(400, body) == message


# -- over HTTP -----------------------------------------------------------------------

PROVIDERS = {
    "openai": ProviderEndpoint.OPENAI,
    "vllm": ProviderEndpoint.VLLM,
    "lm_studio": ProviderEndpoint.LM_STUDIO,
}


async def stream_over_http(
    provider: ProviderEndpoint, reply: Reply, request: UnifiedRequest | None = None
) -> tuple[list[Item], BaseException | None, Any, list[Any]]:
    items: list[Item] = []
    error: BaseException | None = None
    response = None
    async with open_replay_server(reply) as server:
        async with CucaClient(provider, base_url=server.url + "/v1", api_key=KEY) as client:
            try:
                async with client.generate_stream(request or simple_request()) as stream:
                    async for item in stream:
                        items.append(item)
                response = stream.response
            except Exception as exc:
                error = exc
        return items, error, response, server.requests


@pytest.mark.parametrize("name", sorted(EXPECTED))
@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_http_transcript_at_random_chunk_boundaries(name: str, data: st.DataObject) -> None:
    body = transcript(name)
    sizes = data.draw(chunk_sizes(len(body), max_chunks=40))
    items, error, response, requests = await stream_over_http(
        PROVIDERS[name.split("/")[0]], Reply(body=body, chunks=sizes)
    )
    expected_items, expected_error, usage, cache, finish = EXPECTED[name]
    assert items == expected_items
    assert error == expected_error
    if expected_error is None:
        assert response.usage == usage
        assert response.prompt_cache_usage == cache
        assert response.finish_reason == finish
    assert [r.path for r in requests] == ["/v1/chat/completions"]


async def test_http_request_body_and_headers_on_the_wire() -> None:
    body = transcript("openai/text")
    _, error, _, requests = await stream_over_http(
        ProviderEndpoint.VLLM, Reply(body=body), tool_round_trip().set_max_tokens(9)
    )
    assert error is None
    (request,) = requests
    assert request.method == "POST"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    sent = request.json()
    assert sent["stream"] is True
    assert sent["max_tokens"] == 9
    assert (
        sent["messages"][1]["reasoning_content"] == "The user asks about Rome. I need get_weather."
    )


async def test_http_non_2xx_raises_status_error_with_vendor_message() -> None:
    reply = Reply(
        body=b'{"error": {"message": "Incorrect API key provided", "type": "invalid_request"}}',
        status=401,
        headers={"content-type": "application/json"},
    )
    _, error, _, _ = await stream_over_http(ProviderEndpoint.OPENAI, reply)
    assert isinstance(error, HttpStatusError)
    assert error.status == 401
    assert error.message == "Incorrect API key provided"


async def test_http_cut_stream_is_transport_error() -> None:
    body = transcript("openai/text")
    items, error, _, _ = await stream_over_http(
        ProviderEndpoint.OPENAI, Reply(body=body, cut_after=body.index(b'"-time"'))
    )
    assert isinstance(error, TransportError)
    assert items == texts("I'm", " unable", " to", " provide", " real")
