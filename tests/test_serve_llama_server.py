"""``cuca serve`` as a gateway in front of a real ``llama-server`` (SmolLM2 135M with
Qwen3's template, so llama-server itself parses ``<think>`` and tool calls out of the
model's output), read by the official ``anthropic`` and ``openai`` SDKs.

What the clients see is compared with what llama-server itself sent, recorded by a
pass-through transport under cuca's upstream client: the reasoning and the answer, the
tool call's id, and the usage, token for token. The second turn's request, as it left
cuca for llama-server, shows where the handed-back reasoning and tool result went
(seed 004 through a gateway: the chat wire's ``reasoning_content``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx
import openai
import pytest
import trio
from support.corpus import TEMPLATES, template_corpus
from support.llama_server import LlamaServer, running_llama_server
from support.recording import RecordingTransport, server_frames

from cuca import CucaClient, ProviderEndpoint
from cuca.providers.llamacpp.encode import LlamaCppConfig
from cuca.serve import Backend, ServeApp, serve

pytestmark = pytest.mark.slow

TOOL_TEMPLATE = "Qwen-Qwen3-0.6B.jinja"
UPSTREAM_KEY = "llama-upstream-key-51d2"
CLIENT_KEY = "client-key"
# a grammar makes the 135M model write a reasoning block, then its answer (llama-server
# refuses a grammar beside tools, so the tool turns rely on the prompt instead)
GREETING = 'root ::= "<think>" "I will greet." "</think>" "Hi!"'
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def llama_server() -> Iterator[LlamaServer]:
    template_corpus()  # the templates are in TEMPLATES from here on
    template = str(TEMPLATES / TOOL_TEMPLATE)
    args = ["--jinja", "--chat-template-file", template, "--api-key", UPSTREAM_KEY]
    with running_llama_server(args) as server:
        yield server


def _deltas(body: bytes) -> list[dict[str, Any]]:
    return [f["choices"][0]["delta"] for f in server_frames(body) if f.get("choices")]


def _usage(body: bytes) -> dict[str, Any]:
    (usage,) = [f["usage"] for f in server_frames(body) if f.get("usage")]
    return dict(usage)


@asynccontextmanager
async def gateway(server: LlamaServer, recorder: RecordingTransport) -> AsyncIterator[str]:
    """``cuca serve`` with every model name routed to ``server``, through ``recorder``."""
    async with httpx.AsyncClient(transport=recorder, timeout=None) as http:
        upstream = CucaClient(
            ProviderEndpoint.LLAMA_CPP,
            base_url=server.url,
            provider_config=LlamaCppConfig(api_key=UPSTREAM_KEY),
            http_client=http,
        )
        app = ServeApp({"*": Backend(upstream)}, api_keys=[CLIENT_KEY], secrets=[UPSTREAM_KEY])
        async with upstream, trio.open_nursery() as nursery:
            url = await nursery.start(serve, app, "127.0.0.1", 0)
            yield url
            nursery.cancel_scope.cancel()


def _anthropic(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key=CLIENT_KEY, max_retries=0)


def _openai(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=CLIENT_KEY, max_retries=0)


GREEDY = {"temperature": 0}  # anthropic 2.x has no temperature argument; the wire has


async def test_serve_llama_server_anthropic_stream_thinks_first_and_hands_reasoning_back(
    llama_server: LlamaServer,
) -> None:
    """The Messages client sees llama-server's reasoning as a signed thinking block
    before the answer, and usage as llama-server counted it; handed back on the next
    turn, the block reaches llama-server as that assistant message's
    ``reasoning_content``."""
    recorder = RecordingTransport({"grammar": GREETING})
    thinking = {"type": "enabled", "budget_tokens": 1024}
    ask = [{"role": "user", "content": "Say hi."}]
    async with gateway(llama_server, recorder) as url, _anthropic(url) as client:
        async with client.messages.stream(
            model="smollm2", max_tokens=32, thinking=thinking, messages=ask, extra_body=GREEDY
        ) as stream:
            kinds = [event.type async for event in stream]
            first = await stream.get_final_message()
        follow = [
            *ask,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "Again."},
        ]
        await client.messages.create(
            model="smollm2", max_tokens=32, thinking=thinking, messages=follow, extra_body=GREEDY
        )
    sent = "".join(d.get("reasoning_content") or "" for d in _deltas(recorder.bodies[0]))
    assert sent.strip() == "I will greet."
    assert [b.type for b in first.content] == ["thinking", "text"]
    assert first.content[0].thinking == sent
    assert first.content[0].signature.startswith("cuca1.")  # the server's own seal
    assert first.content[1].text.strip() == "Hi!"
    assert first.stop_reason == "end_turn"
    assert kinds[0] == "message_start" and kinds.count("content_block_start") == 2
    upstream = _usage(recorder.bodies[0])
    assert first.usage.output_tokens == upstream["completion_tokens"]
    cache = (first.usage.cache_read_input_tokens or 0) + (
        first.usage.cache_creation_input_tokens or 0
    )
    assert first.usage.input_tokens + cache == upstream["prompt_tokens"]
    assistant = recorder.sent[1]["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["reasoning_content"] == sent
    assert assistant["content"].strip() == "Hi!"


def _weather_messages() -> list[dict[str, Any]]:
    """Three questions answered with a call each, then a fourth, as the chat wire has
    them: the pattern makes the 135M model call the tool (tests/test_llama_server.py)."""
    messages: list[dict[str, Any]] = []
    for n, city in enumerate(["London", "Rome", "Berlin"]):
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
        }
        messages.append({"role": "user", "content": f"Weather in {city}?"})
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    messages.append({"role": "user", "content": "Weather in Paris?"})
    return messages


async def test_serve_llama_server_openai_tool_round_trip_keeps_the_servers_call_id(
    llama_server: LlamaServer,
) -> None:
    """The chat client's accumulator gets llama-server's tool call, id and arguments as
    llama-server sent them, with ``tool_calls`` as the finish reason and its usage; the
    result sent back reaches llama-server under that same id."""
    recorder = RecordingTransport()
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    messages = _weather_messages()
    async with gateway(llama_server, recorder) as url, _openai(url) as client:
        async with client.chat.completions.stream(
            model="smollm2",
            messages=messages,
            tools=tools,
            max_tokens=48,
            temperature=0,
            stream_options={"include_usage": True},
        ) as stream:
            first = await stream.get_final_completion()
        message = first.choices[0].message
        calls = message.tool_calls or []
        follow = [
            *messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [c.model_dump(exclude_none=True) for c in calls],
            },
            *({"role": "tool", "tool_call_id": c.id, "content": "rainy"} for c in calls),
        ]
        second = await client.chat.completions.create(
            model="smollm2",
            messages=follow,
            tools=tools,
            max_tokens=16,
            temperature=0,
        )
    server_calls = [c for d in _deltas(recorder.bodies[0]) for c in d.get("tool_calls") or []]
    (server_id,) = {c["id"] for c in server_calls if c.get("id")}
    assert [(c.id, c.function.name) for c in calls] == [(server_id, "get_weather")]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert first.choices[0].finish_reason == "tool_calls"
    upstream = _usage(recorder.bodies[0])
    assert first.usage is not None
    assert first.usage.prompt_tokens == upstream["prompt_tokens"]
    assert first.usage.completion_tokens == upstream["completion_tokens"]
    tool_message = recorder.sent[1]["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": server_id, "content": "rainy"}
    assert second.usage is not None and second.usage.prompt_tokens > upstream["prompt_tokens"]
