"""LiteLLM as a third-party client of ``cuca serve``'s chat route: its OpenAI-compatible
provider reads the stream (reasoning beside tool calls, usage) and the whole response
as it reads OpenAI's. LiteLLM runs on asyncio, so it is driven synchronously in a
worker thread."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from support.serve_backends import ScriptedBackend

from cuca.serve import Backend, ServeApp, serve
from cuca.types import Text, Thinking, TokenUsage, ToolCall

pytestmark = pytest.mark.slow  # importing LiteLLM takes seconds

TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]


@asynccontextmanager
async def served(backend: ScriptedBackend) -> AsyncIterator[str]:
    app = ServeApp({"smol": Backend(backend)}, api_keys=["client-key"])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, app, "127.0.0.1", 0)
        yield url
        nursery.cancel_scope.cancel()


def _litellm() -> Any:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no download of prices
    import litellm

    return litellm


def _client(url: str) -> Any:
    """The OpenAI client LiteLLM sends on, ours to close: left to LiteLLM, it is cached
    inside LiteLLM and its socket is still open when the interpreter exits."""
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="client-key")


def _complete(url: str, **extra: Any) -> Any:
    """``litellm.completion`` of the test's question, whole (a stream read to its end)."""
    with _client(url) as client:
        answer = _litellm().completion(
            model="openai/smol",
            api_base=f"{url}/v1",
            api_key="client-key",
            messages=[{"role": "user", "content": "weather?"}],
            tools=TOOLS,
            client=client,
            **extra,
        )
        return list(answer) if extra.get("stream") else answer


def _stream(url: str) -> tuple[list[Any], Any]:
    chunks = _complete(url, stream=True, stream_options={"include_usage": True})
    return chunks, _litellm().stream_chunk_builder(chunks)


def _whole(url: str) -> Any:
    return _complete(url)


async def test_serve_litellm_reads_reasoning_tool_calls_and_usage_from_the_stream() -> None:
    batches = [
        [Thinking("I will look it up.")],
        [ToolCall("call_1", "get_weather", {"city": "Rome"})],
    ]
    backend = ScriptedBackend(batches, usage=TokenUsage(12, 7))
    async with served(backend) as url:
        chunks, built = await trio.to_thread.run_sync(_stream, url)
    reasoning = "".join(
        getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
    )
    assert reasoning == "I will look it up."
    message = built.choices[0].message
    assert built.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in message.tool_calls] == ["get_weather"]
    assert message.tool_calls[0].function.arguments == '{"city": "Rome"}'
    assert built.usage.prompt_tokens == 12 and built.usage.completion_tokens == 7


async def test_serve_litellm_reads_the_whole_response() -> None:
    backend = ScriptedBackend([[Thinking("Short.")], [Text("Sunny.")]], usage=TokenUsage(9, 4))
    async with served(backend) as url:
        answer = await trio.to_thread.run_sync(_whole, url)
    message = answer.choices[0].message
    assert message.content == "Sunny."
    assert message.reasoning_content == "Short."
    assert answer.usage.total_tokens == 13
