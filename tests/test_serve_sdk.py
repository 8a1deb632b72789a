"""``cuca serve`` against the official SDKs (``openai``: chat stream helpers and
Responses; ``anthropic``: ``messages.stream``, ``get_final_message``, ``count_tokens``),
backed by the local engine (SmolLM2) and, as a gateway, by the replay server playing
recorded Anthropic and DeepSeek turns. Seed 004's contract, point by point, as a
client sees it: thinking first and closed before the call, signatures that come back
intact, the reasoning of a tool turn handed back to the backend where it belongs,
exact usage announced at ``message_start``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import openai
import pytest
import trio
from support.models import THREADS, model_path
from support.transcripts import transcript

from cuca import CucaClient, ProviderEndpoint, UnifiedRequest
from cuca.engine import LocalModel
from cuca.serve import Backend, ServeApp, serve
from cuca.testing import Reply, open_replay_server
from cuca.types import Text, Thinking

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
QUESTION = "Weather in Paris and Tokyo?"
# greedy decoding: a served local turn at the model's default temperature draws a fresh
# seed, so its length (and whether it reaches max_tokens) differs from run to run.
# anthropic 2.x has no temperature argument; the Messages wire still has the field
GREEDY = {"temperature": 0}

# SmolLM2's ChatML with a reasoning block opened by the generation prompt, and the
# reasoning of earlier answers kept at their own turn (seed 000: reasoning_content)
THINKING_CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m.get('reasoning_content') %}"
    "{{ '<think>\\n' + m['reasoning_content'] + '\\n</think>\\n\\n' }}{% endif %}"
    "{{ m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking %}{{ '<think>\\n' }}{% endif %}{% endif %}"
)


@asynccontextmanager
async def served(backends: dict[str, Backend]) -> AsyncIterator[str]:
    app = ServeApp(backends, api_keys=["client-key"], secrets=["upstream-key"])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, app, "127.0.0.1", 0)
        yield url
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def thinking_model() -> Iterator[LocalModel]:
    model = LocalModel.load(
        model_path("smollm2"), chat_template=THINKING_CHATML, n_seq=2, **THREADS
    )
    with model:
        yield model


@asynccontextmanager
async def local_server(model: LocalModel) -> AsyncIterator[tuple[str, CucaClient]]:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        async with served({"smol": Backend(client, counts_exactly=True)}) as url:
            yield url, client


def _anthropic(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="client-key", max_retries=0)


def _openai(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client-key", max_retries=0)


# -- the local engine ---------------------------------------------------------------------


async def test_serve_local_anthropic_stream_thinks_first_signs_and_counts_exactly(
    thinking_model: LocalModel,
) -> None:
    async with local_server(thinking_model) as (url, _), _anthropic(url) as client:
        counted = await client.messages.count_tokens(
            model="smol",
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "Why is the sky blue?"}],
        )
        first_events: list[Any] = []
        async with client.messages.stream(
            model="smol",
            max_tokens=24,
            extra_body=GREEDY,  # so the answer runs past 24 tokens in every run
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "Why is the sky blue?"}],
        ) as stream:
            async for event in stream:
                first_events.append(event)
            final = await stream.get_final_message()
    start = first_events[0]
    assert start.type == "message_start"
    assert start.message.usage.input_tokens == counted.input_tokens
    usage = final.usage  # at the end, the prompt split as Anthropic splits it
    cache = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    assert usage.input_tokens + cache == counted.input_tokens
    assert final.content[0].type == "thinking"
    assert final.content[0].signature.startswith("cuca1.")
    assert final.stop_reason == "max_tokens"  # 24 tokens cover thinking and answer
    assert final.usage.output_tokens == 24
    kinds = [b.type for b in final.content]
    assert "text" not in kinds or kinds.index("text") > 0


async def test_serve_local_reasoning_goes_back_into_the_template_at_its_own_turn(
    thinking_model: LocalModel,
) -> None:
    """Seed 000 through the Messages wire: the thinking block handed back is rendered
    where the model wrote it, so the next turn reuses the whole first turn's tokens."""
    question = [{"role": "user", "content": "Why is the sky blue?"}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    async with local_server(thinking_model) as (url, _), _anthropic(url) as client:
        first = await client.messages.create(
            model="smol", max_tokens=12, thinking=thinking, messages=question, extra_body=GREEDY
        )
        assert first.content[0].type == "thinking"
        again = [
            *question,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "And red sunsets?"},
        ]
        second = await client.messages.create(
            model="smol", max_tokens=4, thinking=thinking, messages=again, extra_body=GREEDY
        )
    reused = second.usage.cache_read_input_tokens
    assert reused is not None
    assert reused >= first.usage.input_tokens + first.usage.output_tokens - 2


async def test_serve_local_disabled_thinking_really_stops_reasoning(
    thinking_model: LocalModel,
) -> None:
    async with local_server(thinking_model) as (url, _), _anthropic(url) as client:
        final = await client.messages.create(
            model="smol",
            max_tokens=8,
            thinking={"type": "disabled"},
            messages=[{"role": "user", "content": "Say hi."}],
        )
    assert [b.type for b in final.content] == ["text"]


async def test_serve_local_openai_chat_stream_equals_the_turn_run_directly(
    thinking_model: LocalModel,
) -> None:
    async with local_server(thinking_model) as (url, direct), _openai(url) as client:
        async with client.chat.completions.stream(
            model="smol",
            max_tokens=16,
            temperature=0,
            reasoning_effort="low",
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Name a colour."}],
        ) as stream:
            async for _ in stream:
                pass
            # the accumulator's snapshot: get_final_completion() raises for a "length"
            final = stream.current_completion_snapshot
        request = (
            UnifiedRequest.new("smol")
            .add_user_message("Name a colour.")
            .set_max_tokens(16)
            .set_temperature(0)
            .set_thinking(True)
        )
        alone = await direct.generate(request)
    message = final.choices[0].message
    reasoning = "".join(b.text for b in alone.blocks if isinstance(b, Thinking))
    text = "".join(b.text for b in alone.blocks if isinstance(b, Text))
    assert getattr(message, "reasoning", None) == reasoning != ""
    assert getattr(message, "reasoning_content", None) == reasoning
    assert (message.content or "") == text
    assert final.usage is not None and alone.usage is not None
    assert final.usage.prompt_tokens == alone.usage.prompt_tokens
    assert final.usage.completion_tokens == alone.usage.completion_tokens == 16
    assert final.choices[0].finish_reason == "length"


async def test_serve_local_responses_stream_reads_as_the_sdk_expects(
    thinking_model: LocalModel,
) -> None:
    async with local_server(thinking_model) as (url, _), _openai(url) as client:
        async with client.responses.stream(
            model="smol",
            input="Name a fruit.",
            max_output_tokens=12,
            temperature=0,
            reasoning={"effort": "low"},
        ) as stream:
            events = [event async for event in stream]
    assert events[0].type == "response.created"
    last = events[-1]
    assert last.type == "response.incomplete"  # 12 tokens: cut, and said so
    final = last.response
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.output[0].type == "reasoning"
    assert final.usage is not None and final.usage.output_tokens == 12


# -- a gateway, through each inbound wire ---------------------------------------------------


async def test_serve_gateway_anthropic_signatures_come_back_to_the_backend_intact() -> None:
    replies = [
        Reply(transcript("anthropic/thinking_two_tools")),
        Reply(transcript("anthropic/text")),
    ]
    async with open_replay_server(replies) as upstream:
        upstream_client = CucaClient(
            ProviderEndpoint.ANTHROPIC, base_url=upstream.url, api_key="upstream-key"
        )
        async with upstream_client, served({"*": Backend(upstream_client)}) as url:
            async with _anthropic(url) as client:
                ask = [{"role": "user", "content": QUESTION}]
                thinking = {"type": "enabled", "budget_tokens": 2048}
                async with client.messages.stream(
                    model="claude-sonnet-4-5",
                    max_tokens=4096,
                    thinking=thinking,
                    tools=[WEATHER],
                    messages=ask,
                ) as stream:
                    first = await stream.get_final_message()
                kinds = [b.type for b in first.content]
                assert kinds[0] == "thinking" and kinds.count("tool_use") == 2
                assert first.stop_reason == "tool_use"
                results = [
                    {"type": "tool_result", "tool_use_id": b.id, "content": "sunny"}
                    for b in first.content
                    if b.type == "tool_use"
                ]
                follow = [
                    *ask,
                    {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                    {"role": "user", "content": results},
                ]
                await client.messages.create(
                    model="claude-sonnet-4-5",
                    max_tokens=4096,
                    thinking=thinking,
                    tools=[WEATHER],
                    messages=follow,
                )
        first_sent = upstream.requests[0]
        sent = upstream.requests[1].json()
    original = _anthropic_signature(transcript("anthropic/thinking_two_tools"))
    assistant = sent["messages"][1]["content"]
    assert assistant[0]["type"] == "thinking"
    assert assistant[0]["signature"] == original  # Anthropic's bytes, intact
    assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use", "tool_use"]
    assert first_sent.headers["x-api-key"] == "upstream-key"


def _anthropic_signature(stream: bytes) -> str:
    import json

    for line in stream.decode().splitlines():
        if '"signature_delta"' in line:
            return str(json.loads(line.removeprefix("data: "))["delta"]["signature"])
    raise AssertionError("no signature in the transcript")


async def test_serve_gateway_chat_reasoning_of_a_tool_turn_goes_back_as_reasoning_content() -> None:
    replies = [
        Reply(transcript("deepseek/thinking_two_calls")),
        Reply(transcript("deepseek/reasoner")),
    ]
    async with open_replay_server(replies) as upstream:
        upstream_client = CucaClient(
            ProviderEndpoint.DEEPSEEK, base_url=upstream.url, api_key="upstream-key"
        )
        async with upstream_client, served({"*": Backend(upstream_client)}) as url:
            async with _openai(url) as client:
                ask = [{"role": "user", "content": QUESTION}]
                tools = [
                    {
                        "type": "function",
                        "function": {"name": "get_weather", "parameters": WEATHER["input_schema"]},
                    }
                ]
                async with client.chat.completions.stream(
                    model="deepseek-v4-pro", messages=ask, tools=tools, reasoning_effort="high"
                ) as stream:
                    first = await stream.get_final_completion()
                message = first.choices[0].message
                assert first.choices[0].finish_reason == "tool_calls"
                calls = message.tool_calls or []
                assert len(calls) == 2
                reasoning = getattr(message, "reasoning", None)
                assert reasoning == "Two cities: call get_weather for each."
                follow: list[Any] = [
                    *ask,
                    {
                        "role": "assistant",
                        "content": None,
                        "reasoning": reasoning,
                        "tool_calls": [c.model_dump(exclude_none=True) for c in calls],
                    },
                    *({"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in calls),
                ]
                await client.chat.completions.create(
                    model="deepseek-v4-pro", messages=follow, tools=tools
                )
        sent = upstream.requests[1].json()
    assistant = sent["messages"][1]
    assert assistant["reasoning_content"] == "Two cities: call get_weather for each."
    assert [c["id"] for c in assistant["tool_calls"]] == [c.id for c in calls]


async def test_serve_gateway_responses_reasoning_item_reaches_a_chat_backend() -> None:
    """Any inbound wire reaches any backend: a Responses client's reasoning item, handed
    back with its function calls, is DeepSeek's ``reasoning_content``."""
    replies = [
        Reply(transcript("deepseek/thinking_two_calls")),
        Reply(transcript("deepseek/reasoner")),
    ]
    async with open_replay_server(replies) as upstream:
        upstream_client = CucaClient(
            ProviderEndpoint.DEEPSEEK, base_url=upstream.url, api_key="upstream-key"
        )
        async with upstream_client, served({"*": Backend(upstream_client)}) as url:
            async with _openai(url) as client:
                tools: Any = [
                    {
                        "type": "function",
                        "name": "get_weather",
                        "parameters": WEATHER["input_schema"],
                    }
                ]
                async with client.responses.stream(
                    model="deepseek-v4-pro",
                    input=QUESTION,
                    tools=tools,
                    reasoning={"effort": "high"},
                ) as stream:
                    first = await stream.get_final_response()
                output = [item.model_dump(exclude_none=True) for item in first.output]
                assert [o["type"] for o in output] == [
                    "reasoning",
                    "function_call",
                    "function_call",
                ]
                results = [
                    {"type": "function_call_output", "call_id": o["call_id"], "output": "sunny"}
                    for o in output
                    if o["type"] == "function_call"
                ]
                await client.responses.create(
                    model="deepseek-v4-pro",
                    input=[{"role": "user", "content": QUESTION}, *output, *results],
                    tools=tools,
                )
        sent = upstream.requests[1].json()
    assistant = sent["messages"][1]
    assert assistant["reasoning_content"] == "Two cities: call get_weather for each."
    assert len(assistant["tool_calls"]) == 2
