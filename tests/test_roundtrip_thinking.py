"""Interleaved thinking, end to end: a turn that thinks and calls a tool, the tool result
appended, and the next request body carrying the reasoning, signatures and call ids
where, and in the order, each vendor requires.

Every case runs two real turns over loopback: the replay server answers the first with
a recorded transcript and the second with a plain answer, and the test reads the second
request the server received.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.transcripts import transcript

from cuca import (
    Completion,
    CucaClient,
    MessageRole,
    ProviderEndpoint,
    StreamIncomplete,
    Text,
    Thinking,
    ThinkingEffort,
    ToolCall,
    UnifiedMessage,
    UnifiedRequest,
    merge_blocks,
)
from cuca.testing import RecordedRequest, Reply, open_replay_server

ANTHROPIC = ProviderEndpoint.ANTHROPIC
DEEPSEEK = ProviderEndpoint.DEEPSEEK
GEMINI = ProviderEndpoint.GOOGLE_GEMINI
QUESTION = "Weather in Paris and Tokyo?"
JSON = [("content-type", "application/json")]


async def round_trip(
    endpoint: ProviderEndpoint,
    first: str,
    second: str,
    request: UnifiedRequest,
    base_suffix: str = "",
) -> tuple[Completion, dict[str, Any]]:
    """Run the turn answered by transcript ``first``, answer each of its tool calls,
    run the follow-up (answered by ``second``) and return the first turn and the body
    of the follow-up request."""
    replies = [Reply(transcript(first)), Reply(transcript(second))]
    async with open_replay_server(replies) as server:
        base = server.url + base_suffix
        async with CucaClient(endpoint, base_url=base, api_key="test-key") as client:
            done = await client.generate(request)
            follow_up = request.add_message(done.message)
            for call in calls(done):
                follow_up = follow_up.add_tool_result(call.id, f"result of {call.id}")
            await client.generate(follow_up)
        sent: dict[str, Any] = server.requests[1].json()
    return done, sent


def calls(done: Completion) -> list[ToolCall]:
    return [b for b in done.blocks if isinstance(b, ToolCall)]


def thinking_text(done: Completion) -> str:
    return "".join(b.text for b in done.blocks if isinstance(b, Thinking))


# -- Anthropic -----------------------------------------------------------------------


async def test_roundtrip_anthropic_signed_thinking_precedes_tool_use() -> None:
    request = (
        UnifiedRequest.new("claude-sonnet-4-20250514")
        .add_user_message(QUESTION)
        .set_thinking(ThinkingEffort.LOW)
        .set_max_tokens(4096)
    )
    done, sent = await round_trip(
        ANTHROPIC, "anthropic/thinking_two_tools", "anthropic/text", request
    )
    first, second = calls(done)
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "The user wants weather in two cities. I will call get_weather twice.",
                "signature": "EqQBCgIYAhIMsigTwoToolsAbCdEfGh+/==",
            },
            {"type": "text", "text": "Checking both."},
            {
                "type": "tool_use",
                "id": first.id,
                "name": "get_weather",
                "input": dict(first.arguments),
            },
            {
                "type": "tool_use",
                "id": second.id,
                "name": "get_weather",
                "input": dict(second.arguments),
            },
        ],
    }
    results = sent["messages"][2]
    assert results["role"] == "user"
    assert [(b["type"], b["tool_use_id"]) for b in results["content"]] == [
        ("tool_result", first.id),
        ("tool_result", second.id),
    ]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_roundtrip_anthropic_redacted_and_signed_blocks_keep_their_order() -> None:
    request = UnifiedRequest.new("claude-3-7-sonnet-20250219").add_user_message("Think.")
    _, sent = await round_trip(ANTHROPIC, "anthropic/redacted_thinking", "anthropic/text", request)
    assistant = sent["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["redacted_thinking", "thinking", "text"]
    assert assistant[0]["data"].startswith("EmwKAhgB")
    assert assistant[1] == {
        "type": "thinking",
        "thinking": "The rest of my reasoning is visible.",
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
    }


# -- DeepSeek --------------------------------------------------------------------------


async def test_roundtrip_deepseek_bridge_replays_unsigned_thinking() -> None:
    request = UnifiedRequest.new("claude-sonnet-4-5").add_user_message(QUESTION).set_thinking(True)
    done, sent = await round_trip(
        DEEPSEEK, "anthropic/deepseek_bridge", "anthropic/text", request, "/anthropic"
    )
    (call,) = calls(done)
    assert sent["messages"][1]["content"] == [
        {"type": "thinking", "thinking": thinking_text(done)},
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)},
    ]
    (result,) = sent["messages"][2]["content"]
    assert result["tool_use_id"] == call.id


async def test_roundtrip_deepseek_native_sends_reasoning_content_back() -> None:
    request = UnifiedRequest.new("deepseek-v4-pro").add_user_message(QUESTION).set_thinking(True)
    done, sent = await round_trip(DEEPSEEK, "deepseek/tool_call", "deepseek/reasoner", request)
    (call,) = calls(done)
    assistant, tool = sent["messages"][1:3]
    assert assistant["role"] == "assistant"
    assert assistant["reasoning_content"] == thinking_text(done) != ""
    assert [c["id"] for c in assistant["tool_calls"]] == [call.id]
    assert tool == {"role": "tool", "tool_call_id": call.id, "content": f"result of {call.id}"}


# -- Gemini --------------------------------------------------------------------------


async def test_roundtrip_gemini_signature_rides_on_its_function_call() -> None:
    request = UnifiedRequest.new("gemini-3-flash-preview").add_user_message(QUESTION)
    request = request.set_thinking(ThinkingEffort.HIGH)
    done, sent = await round_trip(
        GEMINI, "gemini/thoughts_parallel_calls", "gemini/text_signature", request
    )
    paris, tokyo = calls(done)
    model_turn, answers = sent["contents"][1:3]
    assert model_turn == {
        "role": "model",
        "parts": [
            {"text": thinking_text(done), "thought": True},
            {
                "functionCall": {"name": "weather", "args": {"location": "Paris"}},
                "thoughtSignature": "CiQBcsjafHBhcmFsbGVsLWZpcnN0LWNhbGwtc2lnbmF0dXJl",
            },
            {"functionCall": {"name": "weather", "args": {"location": "Tokyo", "unit": "celsius"}}},
        ],
    }
    # ids cuca made up are not sent; the function name matches each answer to its call
    assert answers == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "weather",
                    "response": {"output": f"result of {paris.id}"},
                }
            },
            {
                "functionResponse": {
                    "name": "weather",
                    "response": {"output": f"result of {tokyo.id}"},
                }
            },
        ],
    }


async def test_roundtrip_gemini_server_call_id_is_echoed() -> None:
    request = UnifiedRequest.new("gemini-3-pro-preview").add_user_message("Look up cuca.")
    _, sent = await round_trip(
        GEMINI, "gemini/function_call_with_id", "gemini/text_signature", request
    )
    model_turn, answers = sent["contents"][1:3]
    assert model_turn["parts"][0]["functionCall"]["id"] == "a1b2c3d4"
    assert model_turn["parts"][0]["thoughtSignature"] == "Cp0BAb4+9vtpZC1jYWxsLXNpZw=="
    assert answers["parts"][0]["functionResponse"]["id"] == "a1b2c3d4"


async def test_roundtrip_gemini_text_signature_goes_back_on_the_text_part() -> None:
    request = UnifiedRequest.new("gemini-3-pro-preview").add_user_message("Count the r's.")
    replies = [Reply(transcript("gemini/text_signature"))] * 2
    async with open_replay_server(replies) as server:
        async with CucaClient(GEMINI, base_url=server.url, api_key="k") as client:
            done = await client.generate(request)
            await client.generate(request.add_message(done.message).add_user_message("Sure?"))
        sent = server.requests[1].json()
    assert sent["contents"][1] == {
        "role": "model",
        "parts": [
            {
                "text": 'There are **3** "r"s in strawberry.\n\nSt**r**awbe**rr**y',
                "thoughtSignature": "EpAICo0IAb4+9vukZW1wdHktdGV4dC1wYXJ0LXNpZ25hdHVyZS1maXh0dXJl",
            }
        ],
    }


# -- the OpenAI-compatible family ------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "first"),
    [
        (ProviderEndpoint.VLLM, "vllm/reasoning_tool_call"),
        (ProviderEndpoint.LM_STUDIO, "lm_studio/gpt_oss_tool_call"),
        (ProviderEndpoint.LLAMA_CPP, "llama_cpp/chat_tool_call"),
    ],
)
async def test_roundtrip_openai_compatible_reasoning_and_call_ids(
    endpoint: ProviderEndpoint, first: str
) -> None:
    request = UnifiedRequest.new("some-model").add_user_message(QUESTION).set_thinking(True)
    done, sent = await round_trip(endpoint, first, "openai/text", request)
    assistant = sent["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["reasoning_content"] == thinking_text(done) != ""
    ids = [c.id for c in calls(done)]
    assert [c["id"] for c in assistant["tool_calls"]] == ids != []
    tools = sent["messages"][2 : 2 + len(ids)]
    assert [(m["role"], m["tool_call_id"]) for m in tools] == [("tool", i) for i in ids]


# -- across providers ------------------------------------------------------------------


async def test_roundtrip_anthropic_turn_continued_on_gemini_drops_foreign_proofs() -> None:
    request = UnifiedRequest.new("claude-sonnet-4-20250514").add_user_message(QUESTION)
    async with open_replay_server(Reply(transcript("anthropic/thinking_two_tools"))) as server:
        async with CucaClient(ANTHROPIC, base_url=server.url, api_key="k") as client:
            done = await client.generate(request.set_max_tokens(4096))
    follow_up = request.add_message(done.message)
    for call in calls(done):
        follow_up = follow_up.add_tool_result(call.id, "18C")
    replies = Reply(transcript("gemini/text_signature"))
    async with open_replay_server(replies) as server:
        async with CucaClient(GEMINI, base_url=server.url, api_key="k") as client:
            await client.generate(follow_up.with_provider(GEMINI))
        sent = server.requests[0].json()
    model_turn, answers = sent["contents"][1:3]
    assert model_turn["parts"] == [
        {"text": "Checking both."},
        {"functionCall": {"name": "get_weather", "args": {"location": "Paris", "unit": "c"}}},
        {"functionCall": {"name": "get_weather", "args": {"location": "Tōkyō", "days": [1, 2]}}},
    ]
    assert [p["functionResponse"]["name"] for p in answers["parts"]] == ["get_weather"] * 2
    assert isinstance(done.blocks[1], Text)


def anthropic_rule(request: RecordedRequest) -> Reply:
    """Anthropic's rule, as a recording server applies it: a replayed ``thinking``
    block without its signature is refused with a 400 (``...thinking.signature: Field
    required``); every other request gets a plain answer."""
    for message in request.json()["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block.get("type") == "thinking" and not block.get("signature"):
                error = {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "messages.1.content.0.thinking.signature: Field required",
                    },
                }
                return Reply(json.dumps(error).encode(), status=400, headers=JSON)
    return Reply(transcript("anthropic/text"))


async def cut_turn(client: CucaClient, request: UnifiedRequest) -> list[Any]:
    """The items of a turn whose stream drops mid-reasoning, the error excluded."""
    items: list[Any] = []
    with pytest.raises(StreamIncomplete):
        async with client.generate_stream(request) as stream:
            async for item in stream:
                items.append(item)
    return items


async def test_roundtrip_anthropic_thinking_cut_before_its_signature_is_not_replayed() -> None:
    """A stream dropped mid-thinking: the reasoning received is kept for the user to see,
    but the unsigned block is not sent back (Anthropic refuses unsigned thinking), so
    the next request is accepted."""
    body = transcript("anthropic/thinking")
    cut = body.index(b"signature_delta")  # inside the thinking block, before its signature
    request = UnifiedRequest.new("claude-sonnet-4-5").add_user_message("Why is the sky blue?")
    first = Reply(body, cut_after=cut)

    def answer(sent: RecordedRequest) -> Reply:
        return first if len(sent.json()["messages"]) == 1 else anthropic_rule(sent)

    async with open_replay_server(answer) as server:
        async with CucaClient(ANTHROPIC, base_url=server.url, api_key="test-key") as client:
            items = await cut_turn(client, request)
            message = UnifiedMessage(MessageRole.ASSISTANT, merge_blocks(items))
            follow_up = request.add_message(message).add_user_message("Go on.")
            done = await client.generate(follow_up)
        sent = server.requests[1].json()
    assert message.content == (
        Thinking(
            "Simple educational question about why the sky is blue.", provider=ANTHROPIC
        ),
    )
    assert done.text == "Hello, wörld! ☀"
    assert "thinking" not in json.dumps(sent["messages"])


async def test_roundtrip_gemini_thinking_cut_before_its_signature_goes_back_unsigned() -> None:
    """The same drop on Gemini: the thoughts received go back as thought parts without
    a ``thoughtSignature`` (none arrived; none is made up or moved onto them)."""
    body = transcript("gemini/thoughts_parallel_calls")
    cut = body.index(b'"functionCall"')  # after both thoughts, before the signed call
    request = UnifiedRequest.new("gemini-3-pro-preview").add_user_message(QUESTION)
    replies = [Reply(body, cut_after=cut), Reply(transcript("gemini/text_signature"))]
    async with open_replay_server(replies) as server:
        async with CucaClient(GEMINI, base_url=server.url, api_key="test-key") as client:
            items = await cut_turn(client, request)
            message = UnifiedMessage(MessageRole.ASSISTANT, merge_blocks(items))
            await client.generate(request.add_message(message).add_user_message("Go on."))
        sent = server.requests[1].json()
    assert message.content == (
        Thinking(
            "The user wants the weather in two cities, so I call weather twice.", provider=GEMINI
        ),
    )
    model_turn = sent["contents"][1]
    assert model_turn == {
        "role": "model",
        "parts": [
            {
                "text": "The user wants the weather in two cities, so I call weather twice.",
                "thought": True,
            }
        ],
    }
