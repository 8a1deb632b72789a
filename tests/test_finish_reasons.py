"""One finish reason on every wire (issue 35 §3), as a user reads it after a turn over
real HTTP from the replay server: ``response.finish_reason`` is the same
:class:`~cuca.FinishReason` whatever the backend, and ``provider_finish_reason`` keeps
the wire's own word. A tool call is ``TOOL_CALLS`` everywhere (Gemini says ``STOP``), and
a cut by ``max_tokens`` while the model is still thinking is ``LENGTH`` everywhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conformance.targets import BY_NAME
from support.transcripts import transcript

from cuca import FinishReason, UnifiedRequest
from cuca.testing import Reply, open_replay_server

ASK = UnifiedRequest.new("conformance-model").add_user_message("Why is the sky blue?")


def sse(*frames: Any, events: tuple[str, ...] = ()) -> bytes:
    """Frames as ``data:`` events (JSON-encoded unless already text), each after its
    ``event:`` line when ``events`` names one."""
    out = []
    for i, frame in enumerate(frames):
        data = frame if isinstance(frame, str) else json.dumps(frame)
        head = f"event: {events[i]}\n" if events else ""
        out.append(f"{head}data: {data}\n\n")
    return "".join(out).encode()


def chat_cut() -> bytes:
    """A chat-wire turn cut by max_tokens inside its reasoning."""
    delta = {"choices": [{"index": 0, "delta": {"reasoning_content": "Rayleigh"}}]}
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    return sse(delta, end, "[DONE]")


def responses_cut() -> bytes:
    item = {"type": "reasoning", "id": "rs_1", "summary": []}
    usage = {"input_tokens": 5, "output_tokens": 16}
    incomplete = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "usage": usage,
        "output": [item],
    }
    return sse(
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "Ray"},
        {"type": "response.incomplete", "response": incomplete},
    )


def anthropic_cut() -> bytes:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
               "usage": {"input_tokens": 5, "output_tokens": 1}}  # fmt: skip
    frames = [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "thinking_delta", "thinking": "Ray"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
                           "usage": {"output_tokens": 16}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return sse(*(f for _, f in frames), events=tuple(e for e, _ in frames))


def gemini_cut() -> bytes:
    part = {"text": "Rayleigh", "thought": True}
    return sse(
        {
            "candidates": [
                {"content": {"parts": [part], "role": "model"}, "finishReason": "MAX_TOKENS"}
            ],
            "usageMetadata": {"promptTokenCount": 5, "thoughtsTokenCount": 16},
        }
    )


def completion_cut() -> bytes:
    return sse(
        {"content": "Ray", "stop": False},
        {"content": "", "stop": True, "stop_type": "limit"},
    )


CASES = [
    # (target, body, finish_reason, provider_finish_reason)
    ("openai", transcript("openai/text"), FinishReason.STOP, "stop"),
    ("openai", transcript("openai/tool_call"), FinishReason.TOOL_CALLS, "tool_calls"),
    ("openai", chat_cut(), FinishReason.LENGTH, "length"),
    ("vllm", transcript("vllm/reasoning_tool_call"), FinishReason.TOOL_CALLS, "tool_calls"),
    ("vllm", chat_cut(), FinishReason.LENGTH, "length"),
    ("lm_studio", transcript("lm_studio/reasoning"), FinishReason.STOP, "stop"),
    ("lm_studio", chat_cut(), FinishReason.LENGTH, "length"),
    ("deepseek", transcript("deepseek/tool_call"), FinishReason.TOOL_CALLS, "tool_calls"),
    ("deepseek", chat_cut(), FinishReason.LENGTH, "length"),
    ("llama_cpp_chat", transcript("llama_cpp/chat_text"), FinishReason.STOP, "stop"),
    (
        "llama_cpp_chat",
        transcript("llama_cpp/chat_tool_call"),
        FinishReason.TOOL_CALLS,
        "tool_calls",
    ),
    ("llama_cpp_chat", chat_cut(), FinishReason.LENGTH, "length"),
    ("openai_responses", transcript("openai_responses/text"), FinishReason.STOP, "completed"),
    (
        "openai_responses",
        transcript("openai_responses/reasoning_two_tools"),
        FinishReason.TOOL_CALLS,
        "completed",
    ),
    ("openai_responses", responses_cut(), FinishReason.LENGTH, "max_output_tokens"),
    ("anthropic", transcript("anthropic/text"), FinishReason.STOP, "end_turn"),
    ("anthropic", transcript("anthropic/tool_use"), FinishReason.TOOL_CALLS, "tool_use"),
    ("anthropic", anthropic_cut(), FinishReason.LENGTH, "max_tokens"),
    (
        "deepseek_bridge",
        transcript("anthropic/deepseek_bridge_two_tools"),
        FinishReason.TOOL_CALLS,
        "tool_use",
    ),
    ("deepseek_bridge", anthropic_cut(), FinishReason.LENGTH, "max_tokens"),
    ("gemini", transcript("gemini/text_signature"), FinishReason.STOP, "STOP"),
    ("gemini", transcript("gemini/tool_call"), FinishReason.TOOL_CALLS, "STOP"),
    ("gemini", gemini_cut(), FinishReason.LENGTH, "MAX_TOKENS"),
    ("llama_cpp_completion", transcript("llama_cpp/completion"), FinishReason.STOP, "eos"),
    ("llama_cpp_completion", completion_cut(), FinishReason.LENGTH, "limit"),
]


@pytest.mark.parametrize(
    ("target", "body", "reason", "native"),
    CASES,
    ids=[f"{c[0]}-{c[2].value}-{i}" for i, c in enumerate(CASES)],
)
async def test_finish_reason_is_the_same_on_every_wire(
    target: str, body: bytes, reason: FinishReason, native: str
) -> None:
    async with open_replay_server(Reply(body)) as server:
        async with BY_NAME[target].client(server.url) as client:
            done = await client.generate(ASK.set_max_tokens(16))
    assert done.finish_reason is reason
    assert done.response.provider_finish_reason == native


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("insufficient_system_resource", FinishReason.ERROR),
        ("something_new", FinishReason.OTHER),
    ],
)
async def test_finish_reason_of_the_chat_wire_maps_every_documented_value(
    raw: str, reason: FinishReason
) -> None:
    end = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": raw}]}
    async with open_replay_server(Reply(sse(end, "[DONE]"))) as server:
        async with BY_NAME["openai"].client(server.url) as client:
            done = await client.generate(ASK)
    assert (done.finish_reason, done.response.provider_finish_reason) == (reason, raw)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("refusal", FinishReason.REFUSAL),
        ("stop_sequence", FinishReason.STOP),
        ("model_context_window_exceeded", FinishReason.LENGTH),
        ("pause_turn", FinishReason.OTHER),
    ],
)
async def test_finish_reason_of_anthropic_maps_every_documented_value(
    raw: str, reason: FinishReason
) -> None:
    body = anthropic_cut().replace(b'"max_tokens"', json.dumps(raw).encode())
    async with open_replay_server(Reply(body)) as server:
        async with BY_NAME["anthropic"].client(server.url) as client:
            done = await client.generate(ASK)
    assert (done.finish_reason, done.response.provider_finish_reason) == (reason, raw)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("SAFETY", FinishReason.CONTENT_FILTER),
        ("RECITATION", FinishReason.CONTENT_FILTER),
        ("MALFORMED_FUNCTION_CALL", FinishReason.ERROR),
        ("LANGUAGE", FinishReason.OTHER),
    ],
)
async def test_finish_reason_of_gemini_maps_every_documented_value(
    raw: str, reason: FinishReason
) -> None:
    body = gemini_cut().replace(b'"MAX_TOKENS"', json.dumps(raw).encode())
    async with open_replay_server(Reply(body)) as server:
        async with BY_NAME["gemini"].client(server.url) as client:
            done = await client.generate(ASK)
    assert (done.finish_reason, done.response.provider_finish_reason) == (reason, raw)


async def test_finish_reason_of_a_stop_word_on_the_completion_route_is_stop() -> None:
    body = completion_cut().replace(b'"limit"', b'"word"')
    async with open_replay_server(Reply(body)) as server:
        async with BY_NAME["llama_cpp_completion"].client(server.url) as client:
            done = await client.generate(ASK.set_stop("END"))
    assert (done.finish_reason, done.response.provider_finish_reason) == ("stop", "word")
