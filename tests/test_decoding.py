"""What every decoder reads the same way: counts, tool-call arguments, error bodies."""

from __future__ import annotations

import json

from cuca import ProviderEndpoint, ToolCall, ToolCallError
from cuca.providers.anthropic_decode import AnthropicDecoder
from cuca.providers.decoding import json_body, read_int, tool_arguments
from cuca.providers.gemini_decode import GeminiDecoder
from cuca.providers.openai_decode import ChatCompletionsDecoder
from cuca.stages import SseEvent


def test_decoding_read_int_refuses_bools_and_strings() -> None:
    assert [read_int(v) for v in (0, 12, True, False, "3", 2.0, None)] == [
        0, 12, None, None, None, None, None,
    ]


def test_decoding_tool_arguments_one_rule() -> None:
    assert tool_arguments("") == {} == tool_arguments("  ")
    assert tool_arguments('{"city": "Paris"}') == {"city": "Paris"}
    assert tool_arguments('{"city": ') is None
    assert tool_arguments("[1, 2]") is None
    assert tool_arguments("[" * 100_000) is None  # hostile nesting


def test_decoding_json_body_unwraps_gemini_lists() -> None:
    assert json_body('[{"error": {"message": "x"}}]') == {"error": {"message": "x"}}
    assert json_body("not json") is None


def test_decoding_a_true_count_is_no_count_for_gemini_and_openai() -> None:
    """The same `true` means the same for every adapter: not a token count of 1."""
    gemini = GeminiDecoder()
    frame = {
        "candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": True, "candidatesTokenCount": 4},
    }
    gemini.feed(SseEvent(json.dumps(frame)))
    gemini.close()
    usage = gemini.summary().usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (0, 4)

    openai = ChatCompletionsDecoder("openai")
    chunk = {"choices": [], "usage": {"prompt_tokens": True, "completion_tokens": 4}}
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
