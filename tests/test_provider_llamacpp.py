"""llama.cpp: endpoint rules, the chat route (the OpenAI-compatible adapter) and the
native ``/completion`` route, sans-IO and over loopback with the replay server."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.transcripts import decode_chunks, error_frame, in_stream, transcript

from cuca import (
    ConfigurationError,
    ContextOverflowError,
    CucaClient,
    HttpContextOverflowError,
    ImageBase64,
    JsonError,
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
    UnifiedRequest,
)
from cuca.providers.base import ClientSettings, Item
from cuca.providers.chat.encode import ChatCompletionsDecoder, OpenAiCompatAdapter
from cuca.providers.llamacpp.encode import (
    CompletionDecoder,
    LlamaCompletionAdapter,
    LlamaCppConfig,
    LlamaRoute,
    completion_prompt,
    make_llama_cpp,
)
from cuca.providers.registry import adapter_for
from cuca.testing import Reply, chunk_sizes, chunkings, open_replay_server

CHAT = LlamaCppConfig()
COMPLETION = LlamaCppConfig(route=LlamaRoute.COMPLETION)


def make(
    config: LlamaCppConfig | None = None, base_url: str | None = None, api_key: str | None = None
) -> Any:
    return make_llama_cpp(ClientSettings(ProviderEndpoint.LLAMA_CPP, base_url, api_key, config))


def request(**changes: Any) -> UnifiedRequest:
    out = UnifiedRequest.new("req-model").add_system_message("Be brief.").add_user_message("Hi")
    for key, value in changes.items():
        out = getattr(out, f"set_{key}")(value)
    return out


# -- endpoint and auth ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_url", "client_url", "chat", "completion"),
    [
        (
            None,
            None,
            "http://127.0.0.1:8080/v1/chat/completions",
            "http://127.0.0.1:8080/completion",
        ),
        (None, "http://h:1234", "http://h:1234/v1/chat/completions", "http://h:1234/completion"),
        (None, "http://h:1234/", "http://h:1234/v1/chat/completions", "http://h:1234/completion"),
        (
            None,
            "http://h:1234/v1",
            "http://h:1234/v1/chat/completions",
            "http://h:1234/v1/completion",
        ),
        (None, "http://h/v1/", "http://h/v1/chat/completions", "http://h/v1/completion"),
        (
            "http://cfg:1",
            "http://client:2",
            "http://cfg:1/v1/chat/completions",
            "http://cfg:1/completion",
        ),
        (
            "",
            "http://client:2",
            "http://client:2/v1/chat/completions",
            "http://client:2/completion",
        ),
        ("", "", "http://127.0.0.1:8080/v1/chat/completions", "http://127.0.0.1:8080/completion"),
    ],
)
def test_llamacpp_endpoint_rules(
    config_url: str | None, client_url: str | None, chat: str, completion: str
) -> None:
    chat_adapter = make(LlamaCppConfig(base_url=config_url), client_url)
    completion_adapter = make(
        LlamaCppConfig(base_url=config_url, route=LlamaRoute.COMPLETION), client_url
    )
    assert chat_adapter.encode(request()).url == chat
    assert completion_adapter.encode(request()).url == completion


def test_llamacpp_registry_and_default_route() -> None:
    adapter = adapter_for(ClientSettings(ProviderEndpoint.LLAMA_CPP))
    assert isinstance(adapter, OpenAiCompatAdapter)
    assert isinstance(make(COMPLETION), LlamaCompletionAdapter)


def test_llamacpp_rejects_a_foreign_config() -> None:
    with pytest.raises(ConfigurationError, match="LlamaCppConfig"):
        make({"route": "completion"})  # type: ignore[arg-type]


@pytest.mark.parametrize("config", [CHAT, COMPLETION])
@pytest.mark.parametrize(
    ("config_key", "client_key", "header"),
    [
        (None, None, None),
        ("", None, None),
        (None, "client-key", "Bearer client-key"),
        ("config-key", "client-key", "Bearer config-key"),
        ("config-key", None, "Bearer config-key"),
    ],
)
def test_llamacpp_auth(
    config: LlamaCppConfig, config_key: str | None, client_key: str | None, header: str | None
) -> None:
    config = LlamaCppConfig(api_key=config_key, route=config.route)
    headers = make(config, api_key=client_key).encode(request()).headers
    assert headers.get("authorization") == header


def test_llamacpp_config_repr_hides_key() -> None:
    config = LlamaCppConfig(api_key="llama-secret-key", model="m")
    assert "llama-secret-key" not in repr(config)
    for route in LlamaRoute:
        adapter = make(LlamaCppConfig(api_key="llama-secret-key", route=route))
        assert "llama-secret-key" not in repr(adapter)
        assert "llama-secret-key" not in repr(adapter.encode(request()))


# -- chat route ----------------------------------------------------------------------


def test_llamacpp_chat_body_is_the_openai_body() -> None:
    config = LlamaCppConfig(model="cfg-model", n_threads=2, n_gpu_layers=9, flash_attn=True)
    body = make(config).encode(request(max_tokens=5)).body
    assert body == {
        "model": "cfg-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 5,
    }


def test_llamacpp_chat_model_falls_back_to_request() -> None:
    assert make(CHAT).encode(request()).body["model"] == "req-model"


@pytest.mark.parametrize(
    ("effort", "expected"),
    [
        (ThinkingEffort.MINIMAL, "minimal"),
        (ThinkingEffort.LOW, "low"),
        (ThinkingEffort.MEDIUM, "medium"),
        (ThinkingEffort.HIGH, "high"),
        (ThinkingEffort.XHIGH, "high"),
    ],
)
def test_llamacpp_chat_reasoning_effort(effort: ThinkingEffort, expected: str) -> None:
    body = make(CHAT).encode(request(thinking=ThinkingConfig.on(effort))).body
    assert body["reasoning_effort"] == expected


CHAT_EXPECTED: dict[str, tuple[list[Item], Any, Any, Any]] = {
    "llama_cpp/chat_tool_call": (
        [
            Thinking("Need weather", provider=ProviderEndpoint.LLAMA_CPP),
            ToolCall("Xa8fK2pQ7rTz9LmN3bVc5HdJ1sWy4EgU", "get_weather", {"city": "Paris"}),
        ],
        None,
        TokenUsage(44, 35, None),
        PromptCacheUsage(0, 0),
    ),
    "llama_cpp/chat_whole_tool_calls": (
        [
            ToolCall("p1QwErTy", "get_time", {}),
            ToolCall("p2AsDfGh", "get_weather", {"city": "Paris"}),
        ],
        None,
        None,
        None,
    ),
    "llama_cpp/chat_error": (
        [Text("Hel")],
        in_stream("llama_cpp/chat_error", 500, "Failed to decode the batch"),
        None,
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(CHAT_EXPECTED))
@settings(max_examples=examples(50), deadline=None)
@given(data=st.data())
def test_llamacpp_chat_transcript_any_chunking(name: str, data: st.DataObject) -> None:
    chunks = data.draw(chunkings(transcript(name)))
    out = decode_chunks(ChatCompletionsDecoder("llama_cpp"), chunks)
    items, error, usage, cache = CHAT_EXPECTED[name]
    assert out.items == items
    assert out.error == error
    assert out.summary.usage == usage
    assert out.summary.prompt_cache_usage == cache


# -- completion route: request -------------------------------------------------------


def test_llamacpp_completion_prompt_layout() -> None:
    conversation = (
        UnifiedRequest.new("m")
        .add_system_message("You are terse.")
        .add_user_message([Text("Capital of"), ImageBase64("image/png", "AAAA"), Text("France?")])
        .add_assistant_message([Thinking("easy"), Text("Par"), Text("is.")])
        .add_tool_result("c1", "ignored")
        .add_user_message("And Italy?")
    )
    assert completion_prompt(conversation) == (
        "You are terse.\n"
        "### User: Capital of\nFrance?\n"
        "### Assistant: Paris.\n"
        "### User: And Italy?\n"
        "### Assistant:"
    )


def test_llamacpp_completion_prompt_continues_a_final_assistant_turn() -> None:
    conversation = UnifiedRequest.new("m").add_user_message("Hi").add_assistant_message("Hello,")
    assert completion_prompt(conversation) == "### User: Hi\n### Assistant: Hello,"


def test_llamacpp_completion_body_minimal() -> None:
    body = make(COMPLETION).encode(request()).body
    assert body == {
        "prompt": "Be brief.\n### User: Hi\n### Assistant:",
        "stream": True,
        "n_predict": 128,
        "model": "req-model",
    }


def test_llamacpp_completion_body_everything_set() -> None:
    config = LlamaCppConfig(
        model="cfg", n_threads=3, n_gpu_layers=0, flash_attn=True, route=LlamaRoute.COMPLETION
    )
    thinking = ThinkingConfig.on(ThinkingEffort.HIGH)
    req = request(max_tokens=7, temperature=0.0, thinking=thinking).add_tool("f", "", None)
    body = make(config).encode(req).body
    assert body == {
        "prompt": "Be brief.\n### User: Hi\n### Assistant:",
        "stream": True,
        "n_predict": 7,
        "temperature": 0.0,
        "n_threads": 3,
        "n_gpu_layers": 0,
        "flash_attn": True,
        "model": "cfg",
    }


def test_llamacpp_completion_flash_attn_false_not_sent() -> None:
    config = LlamaCppConfig(flash_attn=False, route=LlamaRoute.COMPLETION)
    assert "flash_attn" not in make(config).encode(request()).body


# -- completion route: frames --------------------------------------------------------


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_llamacpp_completion_transcript_any_chunking(data: st.DataObject) -> None:
    decoder = CompletionDecoder()
    out = decode_chunks(decoder, data.draw(chunkings(transcript("llama_cpp/completion"))))
    assert out.items == [Text(" Paris"), Text(".")]
    assert out.error is None
    assert out.summary.usage is None
    assert out.summary.finish_reason == "stop"
    assert not decoder.finished  # the stream ends with the byte stream (seed 002)
    assert decoder.text_blocks == 2


def test_llamacpp_completion_stop_frame_content_is_text() -> None:
    """Seed 002: "A non-empty content becomes MessageContentBlock::Text"; the final
    frame is no exception ("A frame with empty or missing content, including the final
    {"content": "", "stop": true}, produces no block": an empty one only)."""
    out = decode_chunks(CompletionDecoder(), [transcript("llama_cpp/completion_old_final")])
    assert out.items == [Text(" Paris"), Text("."), Text(" Paris.")]
    assert out.summary.finish_reason == "length"


def test_llamacpp_completion_frames_after_stop_are_read() -> None:
    """Seed 002: "the stream ends when the byte stream ends", not at the stop frame."""
    decoder = CompletionDecoder()
    frames = (
        b'data: {"content": "a", "stop": false}\n\n'
        b'data: {"content": "", "stop": true, "stop_type": "eos"}\n\n'
        b'data: {"content": "b", "stop": false}\n\n'
        b'data: {"error": {"message": "late"}}\n\n'
    )
    out = decode_chunks(decoder, [frames])
    assert not decoder.finished
    assert out.items == [Text("a"), Text("b")]
    assert out.error == ProviderError("llama_cpp", "late")


def test_llamacpp_completion_error_frame_ends_the_stream() -> None:
    out = decode_chunks(CompletionDecoder(), [transcript("llama_cpp/completion_error")])
    assert out.items == [Text(" Paris")]
    # "code": 400, "type": "exceed_context_size_error": what the status would have been,
    # an HttpContextOverflowError with the window and the prompt's size
    message = "the request exceeds the available context size, try increasing it"
    frame = error_frame("llama_cpp/completion_error")
    assert out.error == HttpContextOverflowError(400, frame, message, limit=4096, requested=6009)
    assert isinstance(out.error, ContextOverflowError) and out.error.provider == "llama_cpp"


@pytest.mark.parametrize("bad", [b"data: {oops\n\n", b"data: [1, 2]\n\n", b"data: 42\n\n"])
def test_llamacpp_completion_malformed_frame_ends_the_stream(bad: bytes) -> None:
    good = b'data: {"content": "a", "stop": false}\n\n'
    after = b'data: {"content": "b", "stop": false}\n\n'
    out = decode_chunks(CompletionDecoder(), [good + bad + after])
    assert out.items == [Text("a")]
    assert isinstance(out.error, (JsonError, ProviderError))


def test_llamacpp_completion_empty_or_missing_content_gives_nothing() -> None:
    frames = b'data: {"content": "", "stop": false}\n\ndata: {"stop": false}\n\n'
    out = decode_chunks(CompletionDecoder(), [frames])
    assert out.items == []
    assert out.error is None


def test_llamacpp_completion_stream_ends_with_the_bytes() -> None:
    decoder = CompletionDecoder()
    out = decode_chunks(decoder, [b'data: {"content": "a", "stop": false}\n\n'])
    assert out.items == [Text("a")]
    assert out.error is None
    assert not decoder.finished


# -- over HTTP -----------------------------------------------------------------------


async def run(config: LlamaCppConfig, reply: Reply, req: UnifiedRequest) -> tuple[Any, ...]:
    async with open_replay_server(reply) as server:
        client = CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url, provider_config=config)
        items: list[Item] = []
        error: Exception | None = None
        async with client:
            try:
                async with client.generate_stream(req) as stream:
                    async for item in stream:  # kept item by item: an error may end it
                        items.append(item)
            except Exception as exc:
                error = exc
        return items, error, stream.response, server.requests


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_llamacpp_completion_over_http(data: st.DataObject) -> None:
    body = transcript("llama_cpp/completion")
    sizes = data.draw(chunk_sizes(len(body), max_chunks=30))
    items, error, response, requests = await run(
        COMPLETION, Reply(body=body, chunks=sizes), request(max_tokens=3)
    )
    assert error is None
    assert items == [Text(" Paris"), Text(".")]
    assert response.usage is None
    (sent,) = requests
    assert sent.path == "/completion"
    assert "authorization" not in sent.headers
    assert sent.json()["n_predict"] == 3


async def test_llamacpp_completion_non_streamed_request_still_streams() -> None:
    """Seed 002, completion route: "stream is always true". A ``set_stream(False)``
    request is sent with ``stream: true`` and collected from the stream: the user gets
    the same Completion as from a streamed request."""
    body = transcript("llama_cpp/completion")
    async with open_replay_server(Reply(body=body)) as server:
        client = CucaClient(
            ProviderEndpoint.LLAMA_CPP, base_url=server.url, provider_config=COMPLETION
        )
        async with client:
            single = await client.generate(request().set_stream(False))
            streamed = await client.generate(request())
        sent = [r.json() for r in server.requests]
    assert [s["stream"] for s in sent] == [True, True]
    assert single.blocks == streamed.blocks
    assert "".join(b.text for b in single.blocks if isinstance(b, Text)) == " Paris."
    assert single.response == attrs.evolve(streamed.response, endpoint=single.response.endpoint)


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_llamacpp_chat_over_http(data: st.DataObject) -> None:
    body = transcript("llama_cpp/chat_tool_call")
    sizes = data.draw(chunk_sizes(len(body), max_chunks=30))
    items, error, response, requests = await run(CHAT, Reply(body=body, chunks=sizes), request())
    expected, _, usage, cache = CHAT_EXPECTED["llama_cpp/chat_tool_call"]
    assert error is None
    assert items == expected
    assert response.usage == usage
    assert response.prompt_cache_usage == cache
    assert [r.path for r in requests] == ["/v1/chat/completions"]


async def test_llamacpp_chat_error_frame_over_http() -> None:
    items, error, _, _ = await run(CHAT, Reply(body=transcript("llama_cpp/chat_error")), request())
    assert items == [Text("Hel")]
    assert error == in_stream("llama_cpp/chat_error", 500, "Failed to decode the batch")
    assert isinstance(error, ServerError) and error.provider == "llama_cpp"


async def test_llamacpp_status_error_message_over_http() -> None:
    body = (
        b'{"error": {"code": 400, "message": "the request exceeds the available context size",'
        b' "type": "exceed_context_size_error", "n_prompt_tokens": 6009, "n_ctx": 4096}}'
    )
    reply = Reply(body=body, status=400, headers={"content-type": "application/json"})
    for config in (CHAT, COMPLETION):
        _, error, _, _ = await run(config, reply, request())
        assert error is not None
        assert getattr(error, "status", None) == 400
        assert getattr(error, "message", None) == "the request exceeds the available context size"
