"""The server side of the three wires cuca serves (``providers/<wire>/outbound.py`` and
``inbound.py``): what a server writes, cuca's own client decoders read back (the same
items, signatures, usage and finish) under any chunking, streamed or whole; what a
client sends, the inbound side reads into the request it stands for, and a body of
the wrong shape is refused naming the field."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuca.errors import ConfigurationError, RateLimitError, ServerError, ToolCallError
from cuca.providers.anthropic import outbound as anthropic_out
from cuca.providers.anthropic.decode import AnthropicDecoder
from cuca.providers.anthropic.inbound import decode as anthropic_in
from cuca.providers.anthropic.whole import anthropic_events
from cuca.providers.chat import outbound as chat_out
from cuca.providers.chat.decode import ChatCompletionsDecoder
from cuca.providers.chat.inbound import decode as chat_in
from cuca.providers.chat.whole import chat_events
from cuca.providers.responses import outbound as responses_out
from cuca.providers.responses.decode import ResponsesDecoder
from cuca.providers.responses.inbound import decode as responses_in
from cuca.providers.responses.whole import responses_events
from cuca.providers.serving import Ending, finish_kind
from cuca.providers.whole_response import WholeResponseDecoder
from cuca.stages.sse import SseEvent, SseParser
from cuca.testing import chunkings
from cuca.types import (
    AnthropicThinkingParams,
    MessageRole,
    PromptCacheUsage,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingEffort,
    TokenUsage,
    ToolCall,
    ToolResult,
)

# -- what a turn holds ------------------------------------------------------------------

_words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_thinking = st.builds(
    Thinking,
    _words,
    signature=st.one_of(st.none(), st.text("abcXYZ019+/=", min_size=1, max_size=16)),
)
_call_ids = st.text("abcdef0123456789", min_size=4, max_size=8).map(lambda s: "call_" + s)
_calls = st.builds(
    ToolCall,
    _call_ids,
    st.sampled_from(["get_weather", "search", "run"]),
    st.dictionaries(st.sampled_from(["city", "q", "n"]), st.one_of(_words, st.integers())),
)
_items = st.lists(st.one_of(st.builds(Text, _words), _thinking, _calls), max_size=10)
_endings = st.builds(
    Ending,
    st.builds(
        TokenUsage,
        st.integers(40, 5000),
        st.integers(0, 900),
        st.one_of(st.none(), st.integers(0, 30)),
    ),
    st.one_of(st.none(), st.builds(PromptCacheUsage, st.integers(0, 20), st.integers(0, 20))),
    st.sampled_from(["stop", "length", "tool_calls", "end_turn", "max_tokens"]),
)


def _blocks(items: Sequence[Any], *, signed: bool, ids: bool = False) -> list[Any]:
    """Items as whole blocks: adjacent text joined; thinking joined up to the item that
    carries its signature (or, with ``ids``, its item id), which ends the block."""
    out: list[Any] = []
    open_thinking = False
    for item in items:
        if isinstance(item, Text):
            if out and isinstance(out[-1], str):
                out[-1] += item.text
            else:
                out.append(item.text)
            open_thinking = False
        elif isinstance(item, Thinking):
            signature = item.signature if signed else None
            if open_thinking:
                (_, text), _ = out[-1]
                out[-1] = ("thinking", text + item.text), signature
            else:
                out.append((("thinking", item.text), signature))
            open_thinking = signature is None and not (ids and item.id)
        elif isinstance(item, ToolCall):
            out.append((item.id, item.name, dict(item.arguments)))
            open_thinking = False
        else:
            out.append(item)
    return [b for b in out if b != "" and b != (("thinking", ""), None)]


def _read(decoder: Any, stream: bytes, chunks: list[bytes]) -> list[Any]:
    parser = SseParser()
    items: list[Any] = []
    for chunk in chunks:
        for event in parser.feed(chunk):
            items += decoder.feed(event)
    return items + decoder.close()


def _whole(decoder: Any, events: Callable[[Any], Any], document: dict[str, Any]) -> list[Any]:
    whole = WholeResponseDecoder(decoder, events, "test")
    return whole.feed(SseEvent(json.dumps(document), "json")) + whole.close()


def _called(items: Sequence[Any]) -> bool:
    return any(isinstance(i, ToolCall) for i in items)


# -- chat -------------------------------------------------------------------------------


def _chat_stream(items: Sequence[Any], ending: Ending) -> bytes:
    writer = chat_out.ChatStream("m", include_usage=True)
    return writer.open() + b"".join(writer.write(i) for i in items) + writer.close(ending)


def _chat_usage(ending: Ending) -> TokenUsage:
    return ending.usage or TokenUsage()


@settings(max_examples=60, deadline=None)
@given(items=_items, ending=_endings, data=st.data())
def test_chat_outbound_reads_back_under_any_chunking(
    items: list[Any], ending: Ending, data: st.DataObject
) -> None:
    stream = _chat_stream(items, ending)
    decoder = ChatCompletionsDecoder("openai", ProviderEndpoint.OPENAI)
    read = _read(decoder, stream, data.draw(chunkings(stream, 12)))
    assert _blocks(read, signed=False) == _blocks(_reordered_calls(items), signed=False)
    summary = decoder.summary()
    assert summary.usage == ending.usage
    cache = ending.prompt_cache_usage
    assert summary.prompt_cache_usage == (cache if cache else None)
    assert finish_kind(summary.finish_reason, _called(read)) == finish_kind(
        ending.finish_reason, _called(items)
    )


def _reordered_calls(items: Sequence[Any]) -> list[Any]:
    """The chat decoder holds calls until the finish chunk, then yields them in order."""
    return [i for i in items if not isinstance(i, ToolCall)] + [
        i for i in items if isinstance(i, ToolCall)
    ]


@settings(max_examples=40, deadline=None)
@given(items=_items, ending=_endings)
def test_chat_completion_reads_back_as_the_stream(items: list[Any], ending: Ending) -> None:
    document = chat_out.completion(items, ending, "m")
    decoder = ChatCompletionsDecoder("openai", ProviderEndpoint.OPENAI)
    read = _whole(decoder, chat_events, document)
    # a whole message holds one reasoning, one text, then the calls
    thinking = "".join(i.text for i in items if isinstance(i, Thinking))
    text = "".join(i.text for i in items if isinstance(i, Text))
    expected = [Thinking(thinking)] * bool(thinking) + [Text(text)] * bool(text)
    expected += [i for i in items if isinstance(i, ToolCall)]
    assert _blocks(read, signed=False) == _blocks(expected, signed=False)
    assert decoder.summary().usage == ending.usage


def test_chat_stream_writes_reasoning_under_both_keys_beside_tool_calls() -> None:
    writer = chat_out.ChatStream("m")
    frames = writer.write(Thinking("plan")) + writer.write(ToolCall("call_1", "f", {"a": 1}))
    frames += writer.close(Ending(finish_reason="stop"))
    chunks = [json.loads(f[6:]) for f in frames.decode().split("\n\n") if f.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"] == {"reasoning": "plan", "reasoning_content": "plan"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert frames.endswith(b"data: [DONE]\n\n")
    assert b'"usage"' not in frames  # not asked for


def test_chat_stream_reports_a_malformed_call_with_its_raw_arguments() -> None:
    writer = chat_out.ChatStream("m")
    error = ToolCallError(
        "local", "malformed tool call: {oops", tool_call_id="c1", name="f", raw="{oops"
    )
    frames = writer.write(error) + writer.close(Ending(finish_reason="stop"))
    decoder = ChatCompletionsDecoder("openai")
    read = _read(decoder, frames, [frames])
    assert len(read) == 1 and isinstance(read[0], ToolCallError)
    assert (read[0].tool_call_id, read[0].name, read[0].raw) == ("c1", "f", "{oops")


def test_chat_stream_error_is_the_openai_in_stream_error() -> None:
    writer = chat_out.ChatStream("m")
    frames = writer.open() + writer.fail(RateLimitError(429, "", "slow down"))
    decoder = ChatCompletionsDecoder("openai")
    with pytest.raises(RateLimitError):
        _read(decoder, frames, [frames])


# -- anthropic --------------------------------------------------------------------------


def _anthropic_stream(items: Sequence[Any], ending: Ending) -> bytes:
    writer = anthropic_out.MessageStream("m")
    body = writer.open(input_tokens=12) + b"".join(writer.write(i) for i in items)
    return body + writer.close(ending)


@settings(max_examples=60, deadline=None)
@given(items=_items, ending=_endings, data=st.data())
def test_anthropic_outbound_reads_back_under_any_chunking(
    items: list[Any], ending: Ending, data: st.DataObject
) -> None:
    stream = _anthropic_stream(items, ending)
    decoder = AnthropicDecoder(ProviderEndpoint.ANTHROPIC, "anthropic")
    read = _read(decoder, stream, data.draw(chunkings(stream, 12)))
    assert _blocks(read, signed=True) == _blocks(items, signed=True)
    summary = decoder.summary()
    assert summary.usage == ending.usage
    cache = ending.prompt_cache_usage or PromptCacheUsage()
    assert summary.prompt_cache_usage == cache
    assert finish_kind(summary.finish_reason, _called(read)) == finish_kind(
        ending.finish_reason, _called(items)
    )


@settings(max_examples=40, deadline=None)
@given(items=_items, ending=_endings)
def test_anthropic_message_reads_back_as_the_stream(items: list[Any], ending: Ending) -> None:
    document = anthropic_out.message(items, ending, "m")
    decoder = AnthropicDecoder(ProviderEndpoint.ANTHROPIC, "anthropic")
    read = _whole(decoder, anthropic_events, document)
    assert _blocks(read, signed=True) == _blocks(items, signed=True)
    assert decoder.summary().usage == ending.usage


def _events(stream: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in stream.decode().split("\n\n"):
        if frame:
            name, data = frame.split("\n", 1)
            out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def test_anthropic_stream_closes_thinking_before_a_call_and_keeps_indices_contiguous() -> None:
    items = [
        Thinking("look it up"),
        ToolCall("call_1", "search", {"q": "x"}),
        Thinking("then answer"),
        Text(""),
        Text("done"),
    ]
    events = _events(_anthropic_stream(items, Ending(TokenUsage(30, 9), None, "stop")))
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 12
    starts = [d for n, d in events if n == "content_block_start"]
    assert [s["index"] for s in starts] == [0, 1, 2, 3]
    assert [s["content_block"]["type"] for s in starts] == [
        "thinking",
        "tool_use",
        "thinking",
        "text",
    ]
    # every block stops before the next one starts
    opened = []
    for name, data in events:
        if name == "content_block_start":
            assert not opened
            opened.append(data["index"])
        elif name == "content_block_stop":
            assert opened.pop() == data["index"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_stream_says_end_turn_when_the_backend_says_tool_use_without_a_call() -> None:
    events = _events(_anthropic_stream([Text("hi")], Ending(None, None, "tool_use")))
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"


def test_anthropic_stream_ends_with_an_error_event_for_a_malformed_call() -> None:
    writer = anthropic_out.MessageStream("m")
    error = ToolCallError("local", "malformed tool call: {x", tool_call_id="c", name="f", raw="{x")
    stream = writer.open() + writer.write(Text("a")) + writer.write(error)
    assert writer.failed and writer.close(Ending()) == b""
    names = [n for n, _ in _events(stream)]
    assert names[-2:] == ["content_block_stop", "error"]
    decoder = AnthropicDecoder(ProviderEndpoint.ANTHROPIC, "anthropic")
    with pytest.raises(ServerError, match=r"\{x"):
        _read(decoder, stream, [stream])


# -- responses --------------------------------------------------------------------------


def _responses_stream(items: Sequence[Any], ending: Ending) -> bytes:
    writer = responses_out.ResponseStream("m")
    return writer.open() + b"".join(writer.write(i) for i in items) + writer.close(ending)


def _no_ids(items: Sequence[Any]) -> list[Any]:
    """Read-back items less the empty signature-less end of each reasoning item (it
    carries only the id the server made up)."""
    return [i for i in items if not (isinstance(i, Thinking) and not i.text and not i.signature)]


@settings(max_examples=60, deadline=None)
@given(items=_items, ending=_endings, data=st.data())
def test_responses_outbound_reads_back_under_any_chunking(
    items: list[Any], ending: Ending, data: st.DataObject
) -> None:
    stream = _responses_stream(items, ending)
    decoder = ResponsesDecoder(ProviderEndpoint.OPENAI)
    read = _read(decoder, stream, data.draw(chunkings(stream, 12)))
    assert _blocks(_no_ids(read), signed=True) == _blocks(items, signed=True)
    summary = decoder.summary()
    usage = ending.usage
    assert usage is not None and summary.usage is not None
    assert summary.usage.prompt_tokens == usage.prompt_tokens
    assert summary.usage.completion_tokens == usage.completion_tokens
    assert summary.usage.reasoning_tokens == (usage.reasoning_tokens or 0)
    cache = ending.prompt_cache_usage
    assert summary.prompt_cache_usage is not None
    assert summary.prompt_cache_usage.read_tokens == (cache.read_tokens if cache else 0)
    assert finish_kind(summary.finish_reason, _called(read)) == finish_kind(
        ending.finish_reason, _called(items)
    )


@settings(max_examples=40, deadline=None)
@given(items=_items, ending=_endings)
def test_responses_response_reads_back_as_the_stream(items: list[Any], ending: Ending) -> None:
    document = responses_out.response(items, ending, "m")
    decoder = ResponsesDecoder(ProviderEndpoint.OPENAI)
    read = _whole(decoder, responses_events, document)
    assert _blocks(_no_ids(read), signed=True) == _blocks(items, signed=True)


def test_responses_stream_numbers_events_and_opens_with_response_created() -> None:
    stream = _responses_stream([Thinking("t"), Text("a")], Ending(TokenUsage(5, 2), None, "stop"))
    events = _events(stream)
    assert events[0][0] == "response.created"
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    done = events[-1][1]["response"]
    assert [o["type"] for o in done["output"]] == ["reasoning", "message"]
    assert done["usage"]["input_tokens"] == 5


# -- inbound ----------------------------------------------------------------------------


def test_chat_inbound_reads_reasoning_and_its_alias_beside_tool_calls() -> None:
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 64,
        "reasoning_effort": "high",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "I should call it",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "Sunny.", "reasoning": "easy"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    }
    inbound = chat_in(body)
    request = inbound.request
    assert inbound.include_usage and request.stream and request.max_tokens == 64
    assert request.thinking is not None and request.thinking.effort is ThinkingEffort.HIGH
    roles = [m.role for m in request.messages]
    assert roles == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    assert request.messages[2].content == (
        Thinking("I should call it"),
        ToolCall("call_1", "get_weather", {"city": "Rome"}),
    )
    assert request.messages[3].content == (ToolResult("call_1", "sunny"),)
    assert request.messages[4].content == (Thinking("easy"), Text("Sunny."))
    assert request.tools[0].name == "get_weather"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ([], "body must be a JSON object"),
        ({"messages": []}, "model is required"),
        ({"model": 3, "messages": []}, "model must be a string"),
        ({"model": "m", "messages": "hi"}, "messages must be an array"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, r"messages\[0\].role"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, r"messages\[0\].content"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": True},
            "max_tokens must be an integer",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 9},
            "temperature",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}],
                    }
                ],
            },
            r"messages\[0\].tool_calls\[0\].function.arguments",
        ),
    ],
)
def test_chat_inbound_refuses_a_wrong_body_naming_the_field(body: Any, where: str) -> None:
    with pytest.raises(ConfigurationError, match=where):
        chat_in(body)


def test_anthropic_inbound_reads_system_roles_thinking_and_tool_results() -> None:
    body = {
        "model": "claude",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "list files"},
            {"role": "system", "content": "<reminder>"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "use ls", "signature": "sig1"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "a b",
                        "is_error": True,
                    },
                    {"type": "text", "text": "and?"},
                ],
            },
        ],
    }
    request = anthropic_in(body).request
    roles = [m.role for m in request.messages]
    assert roles == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.SYSTEM,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.USER,
    ]
    anthropic = ProviderEndpoint.ANTHROPIC
    assert request.messages[3].content == (
        Thinking("use ls", signature="sig1", provider=anthropic),
        Thinking("", signature="opaque", provider=anthropic, redacted=True),
        ToolCall("toolu_1", "bash", {"cmd": "ls"}),
    )
    assert request.messages[4].content == (ToolResult("toolu_1", "a b", is_error=True),)
    thinking = request.thinking
    assert thinking is not None and thinking.params == AnthropicThinkingParams(budget_tokens=1024)
    assert thinking.effort is ThinkingEffort.MINIMAL


def test_anthropic_inbound_disabled_thinking_turns_it_off() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "thinking": {"type": "disabled"},
        "messages": [{"role": "user", "content": "x"}],
    }
    thinking = anthropic_in(body).request.thinking
    assert thinking is not None and not thinking.enabled


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens is required"),
        ({"model": "m", "max_tokens": 1, "messages": [{"role": "bot", "content": "x"}]}, "role"),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "video"}]}],
            },
            r"messages\[0\].content\[0\].type",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "thinking": {"type": "sometimes"},
                "messages": [{"role": "user", "content": "x"}],
            },
            "thinking.type",
        ),
    ],
)
def test_anthropic_inbound_refuses_a_wrong_body_naming_the_field(body: Any, where: str) -> None:
    with pytest.raises(ConfigurationError, match=where):
        anthropic_in(body)


def test_responses_inbound_groups_assistant_items_into_one_turn() -> None:
    body = {
        "model": "m",
        "instructions": "be brief",
        "reasoning": {"effort": "low"},
        "input": [
            {"role": "user", "content": "weather?"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "call it"}],
                "encrypted_content": "enc",
            },
            {"type": "function_call", "call_id": "call_1", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
    }
    request = responses_in(body).request
    assert [m.role for m in request.messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
    ]
    assert request.messages[2].content == (
        Thinking("call it", signature="enc", id="rs_1"),
        ToolCall("call_1", "w", {}),
    )
    assert request.thinking is not None and request.thinking.effort is ThinkingEffort.LOW


def test_responses_inbound_refuses_previous_response_id() -> None:
    with pytest.raises(ConfigurationError, match="previous_response_id"):
        responses_in({"model": "m", "input": "x", "previous_response_id": "resp_1"})


def test_inbound_reads_stop_seed_top_p_and_tool_choice_on_each_wire() -> None:
    from cuca.types import ToolChoice

    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    chat = chat_in(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "stop": "END",
            "seed": 7,
            "top_p": 0.5,
            "tools": tools,
            "tool_choice": {"type": "function", "function": {"name": "f"}},
        }
    ).request
    assert (chat.stop, chat.seed, chat.top_p) == (("END",), 7, 0.5)
    assert chat.tool_choice == ToolChoice.tool("f")
    anthropic = anthropic_in(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "x"}],
            "stop_sequences": ["a", "b"],
            "top_p": 0.9,
            "tool_choice": {"type": "any"},
        }
    ).request
    assert (anthropic.stop, anthropic.top_p) == (("a", "b"), 0.9)
    assert anthropic.tool_choice == ToolChoice.REQUIRED
    responses = responses_in({"model": "m", "input": "x", "tool_choice": "none"}).request
    assert responses.tool_choice == ToolChoice.NONE
    with pytest.raises(ConfigurationError, match="tool_choice"):
        chat_in(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "maybe"}
        )
