"""The tool loop on every backend with tools, over real loopback HTTP.

For each backend the replay server answers step 1 with a recorded or reconstructed
transcript (reasoning, then two parallel calls) and step 2 with a plain answer. The
follow-up request must be byte for byte the golden body in
``tests/transcripts/follow_ups/<backend>.json`` (each reviewed against
shared/reference/wire.md), and the checks below spell out what each vendor rejects
when it is wrong: Anthropic's signed thinking first, DeepSeek's ``reasoning_content``,
Gemini's ``thoughtSignature`` on its call, the Responses API's reasoning item (id and
encrypted content) before its function calls, every call id answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.tool_loop import CASES, Case, run_case
from support.transcripts import TRANSCRIPTS

from cuca import MessageRole, Step, Thinking, ToolCall, ToolResult
from cuca.tools.loop import sum_usage

FOLLOW_UPS = TRANSCRIPTS / "follow_ups"


def calls_of(items: list[Any]) -> list[ToolCall]:
    return [item for item in items if isinstance(item, ToolCall)]


def check_anthropic(body: dict[str, Any], calls: list[ToolCall]) -> None:
    assistant = body["messages"][1]["content"]
    assert [block["type"] for block in assistant] == ["thinking", "text", "tool_use", "tool_use"]
    assert assistant[0]["signature"] == "EqQBCgIYAhIMsigTwoToolsAbCdEfGh+/=="
    answers = body["messages"][2]["content"]
    assert [a["tool_use_id"] for a in answers] == [c.id for c in calls]


def check_bridge(body: dict[str, Any], calls: list[ToolCall]) -> None:
    assistant = body["messages"][1]["content"]
    assert assistant[0] == {
        "type": "thinking",
        "thinking": "The user asks for the weather; call the tool twice.",
    }
    assert [b["id"] for b in assistant[1:]] == [c.id for c in calls]


def check_reasoning_content(text: str) -> Callable[[dict[str, Any], list[ToolCall]], None]:
    def check(body: dict[str, Any], calls: list[ToolCall]) -> None:
        assistant = body["messages"][1]
        assert assistant["reasoning_content"] == text
        assert [c["id"] for c in assistant["tool_calls"]] == [c.id for c in calls]
        assert [m["tool_call_id"] for m in body["messages"][2:4]] == [c.id for c in calls]

    return check


def check_openai(body: dict[str, Any], calls: list[ToolCall]) -> None:
    assert "reasoning_content" not in body["messages"][1]
    assert [m["tool_call_id"] for m in body["messages"][2:4]] == [c.id for c in calls]


def check_gemini(body: dict[str, Any], calls: list[ToolCall]) -> None:
    parts = body["contents"][1]["parts"]
    assert parts[0]["thought"] is True
    assert parts[1]["thoughtSignature"] == "CiQBcsjafHBhcmFsbGVsLWZpcnN0LWNhbGwtc2lnbmF0dXJl"
    assert "thoughtSignature" not in parts[2]
    answers = body["contents"][2]["parts"]
    assert [a["functionResponse"]["response"] for a in answers] == [
        {"output": "Paris: 18 celsius"},
        {"output": "Tokyo: 18 celsius"},
    ]


def check_responses(body: dict[str, Any], calls: list[ToolCall]) -> None:
    reasoning, *rest = body["input"][1:]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["encrypted_content"].startswith("gAAAAAB")  # before the calls (store off)
    assert [(i["type"], i["call_id"]) for i in rest] == [
        *[("function_call", c.id) for c in calls],
        *[("function_call_output", c.id) for c in calls],
    ]


CHECKS: dict[str, Callable[[dict[str, Any], list[ToolCall]], None]] = {
    "openai": check_openai,
    "vllm": check_reasoning_content("Two cities, two calls."),
    "lm_studio": check_reasoning_content("Two cities, two calls."),
    "llama_cpp": check_reasoning_content("Two cities, two calls."),
    "deepseek": check_reasoning_content("Two cities: call get_weather for each."),
    "deepseek_bridge": check_bridge,
    "anthropic": check_anthropic,
    "gemini": check_gemini,
    "openai_responses": check_responses,
}


@pytest.mark.parametrize("chunks", [None, [7] * 300], ids=["whole", "7-byte-writes"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_tool_loop_follow_up_is_exact(case: Case, chunks: list[int] | None) -> None:
    items, _, body = await run_case(case, chunks)
    assert body == (FOLLOW_UPS / f"{case.name}.json").read_bytes()
    CHECKS[case.name](json.loads(body), calls_of(items))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_tool_loop_streams_every_step_marked(case: Case) -> None:
    items, stream, _ = await run_case(case)
    second = items.index(Step(2))
    first_step, last_step = items[1:second], items[second + 1 :]
    assert items[0] == Step(1)
    calls = calls_of(first_step)
    assert len(calls) == 2
    results = [item for item in first_step if isinstance(item, ToolResult)]
    # each result is streamed once its call has run, in whatever order they finish
    assert sorted(r.tool_call_id for r in results) == sorted(c.id for c in calls)
    assert first_step.index(results[0]) > first_step.index(calls[1])
    assert not any(isinstance(item, ToolCall | ToolResult) for item in last_step)
    assert stream.complete
    roles = [m.role for m in stream.conversation.messages]
    assert roles == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        *[MessageRole.TOOL] * 2,
        MessageRole.ASSISTANT,
    ]
    assert [m.tool_call_id for m in stream.conversation.messages[2:4]] == [c.id for c in calls]
    assert len(stream.responses) == 2
    assert stream.usage == sum_usage(r.usage for r in stream.responses)
    assert stream.usage is not None and stream.usage.prompt_tokens > 0


async def test_tool_loop_assistant_message_keeps_thinking_before_calls() -> None:
    (anthropic,) = [c for c in CASES if c.name == "anthropic"]
    _, stream, _ = await run_case(anthropic)
    content = stream.conversation.messages[1].content
    kinds = [type(block).__name__ for block in content]
    assert kinds == ["Thinking", "Text", "ToolCall", "ToolCall"]
    thinking = content[0]
    assert isinstance(thinking, Thinking) and thinking.signature is not None
