"""``cuca serve`` as a gateway in front of a Gemini and a Responses backend (issue 34
§5): scripted servers of those wires on loopback (``cuca.testing``), read through the
server with the official SDKs. A tool round trip with signed thinking through each
inbound wire: the client reads the reasoning first, sealed, the call and the usage; the
next request hands the reasoning back, and the backend receives its own signature
(Gemini's ``thoughtSignature``, the Responses ``encrypted_content`` with the reasoning
item's own ``id``) intact."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import openai
import pytest
import trio

from cuca.serve import Backend, ServeApp, serve
from cuca.testing import ScriptedServer, ScriptedTurn, open_scripted_server
from cuca.types import ProviderEndpoint, Thinking, TokenUsage, ToolCall

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
FUNCTION = {
    "type": "function",
    "name": WEATHER["name"],
    "description": WEATHER["description"],
    "parameters": WEATHER["input_schema"],
}
BACKENDS = {
    "gemini": (ProviderEndpoint.GOOGLE_GEMINI, "gemini-signature-bytes==", None),
    "responses": (ProviderEndpoint.OPENAI, "gAAAAB-encrypted-reasoning", "rs_backend_0001"),
}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def script(wire: str) -> list[ScriptedTurn]:
    issuer, signature, ident = BACKENDS[wire]
    plan = Thinking("I should look it up.", signature=signature, provider=issuer, id=ident)
    call = ToolCall("call_paris", "get_weather", {"city": "Paris"})
    return [
        ScriptedTurn([plan, call], usage=TokenUsage(31, 12)),
        ScriptedTurn(["Sunny in Paris."], usage=TokenUsage(52, 4)),
    ]


@asynccontextmanager
async def gateway(wire: str) -> AsyncIterator[tuple[str, ScriptedServer]]:
    async with open_scripted_server(script(wire), wire) as upstream, upstream.client() as client:
        app = ServeApp({"*": Backend(client)}, api_keys=["client-key"], secrets=["test-key"])
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve, app, "127.0.0.1", 0)
            yield url, upstream
            nursery.cancel_scope.cancel()


def handed_back(wire: str, upstream: ScriptedServer) -> tuple[str | None, str | None]:
    """The signature (and the Responses item id) the backend received on the second
    request."""
    sent = upstream.requests[1].json()
    if wire == "gemini":
        model = next(c for c in sent["contents"] if c["role"] == "model")
        thought = next(p for p in model["parts"] if p.get("thought"))
        return thought.get("thoughtSignature"), None
    item = next(i for i in sent["input"] if i.get("type") == "reasoning")
    return item.get("encrypted_content"), item.get("id")


@pytest.mark.parametrize("wire", sorted(BACKENDS))
async def test_serve_gateway_anthropic_sdk_round_trip_returns_the_backends_signature(
    wire: str,
) -> None:
    """``messages.stream`` reads thinking (sealed), then the tool call, ``tool_use``
    and the backend's usage; handed back, the thinking reaches the backend with its
    own signature."""
    _, signature, ident = BACKENDS[wire]
    async with gateway(wire) as (url, upstream):
        client = anthropic.AsyncAnthropic(base_url=url, api_key="client-key", max_retries=0)
        async with client:
            thinking: Any = {"type": "enabled", "budget_tokens": 1024}
            async with client.messages.stream(
                model="backend-model",
                max_tokens=256,
                thinking=thinking,
                tools=[WEATHER],  # type: ignore[list-item]
                messages=ASK,  # type: ignore[arg-type]
            ) as stream:
                first = await stream.get_final_message()
            assert [b.type for b in first.content] == ["thinking", "tool_use"]
            assert first.content[0].signature.startswith("cuca1.")  # type: ignore[union-attr]
            assert first.stop_reason == "tool_use"
            assert (first.usage.input_tokens, first.usage.output_tokens) == (31, 12)
            call = first.content[1]
            follow = [
                *ASK,
                {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sun"}],  # type: ignore[union-attr]
                },
            ]
            second = await client.messages.create(
                model="backend-model",
                max_tokens=256,
                thinking=thinking,
                tools=[WEATHER],  # type: ignore[list-item]
                messages=follow,  # type: ignore[arg-type]
            )
        assert second.content[0].text == "Sunny in Paris."  # type: ignore[union-attr]
    assert handed_back(wire, upstream) == (signature, ident)


@pytest.mark.parametrize("wire", sorted(BACKENDS))
async def test_serve_gateway_openai_responses_sdk_round_trip_returns_the_backends_signature(
    wire: str,
) -> None:
    """``responses.stream``: a reasoning item (its ``encrypted_content`` the seal),
    then the function call and the usage; the output handed back as the next input
    reaches the backend with its own signature (and, for Responses, its item id)."""
    _, signature, ident = BACKENDS[wire]
    async with gateway(wire) as (url, upstream):
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client-key", max_retries=0)
        async with client:
            async with client.responses.stream(
                model="backend-model",
                input=ASK,  # type: ignore[arg-type]
                tools=[FUNCTION],  # type: ignore[list-item]
                reasoning={"effort": "low"},
                include=["reasoning.encrypted_content"],
                store=False,
            ) as stream:
                first = await stream.get_final_response()
            kinds = [item.type for item in first.output]
            assert kinds == ["reasoning", "function_call"]
            reasoning, call = first.output
            assert reasoning.encrypted_content.startswith("cuca1.")  # type: ignore[union-attr]
            assert first.usage is not None
            assert (first.usage.input_tokens, first.usage.output_tokens) == (31, 12)
            follow = [
                *ASK,
                *(item.model_dump(exclude_none=True) for item in first.output),
                {"type": "function_call_output", "call_id": call.call_id, "output": "sun"},  # type: ignore[union-attr]
            ]
            second = await client.responses.create(
                model="backend-model",
                input=follow,  # type: ignore[arg-type]
                tools=[FUNCTION],  # type: ignore[list-item]
                store=False,
            )
        assert second.output_text == "Sunny in Paris."
    assert handed_back(wire, upstream) == (signature, ident)


@pytest.mark.parametrize("wire", sorted(BACKENDS))
async def test_serve_gateway_openai_chat_stream_reads_reasoning_the_call_and_usage(
    wire: str,
) -> None:
    """The chat stream helper accumulates the reasoning beside the tool call (the
    chat wire has no place for a signature), ``tool_calls`` as the finish reason, and
    the backend's usage in the last chunk."""
    async with gateway(wire) as (url, _):
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client-key", max_retries=0)
        async with client:
            async with client.chat.completions.stream(
                model="backend-model",
                messages=ASK,  # type: ignore[arg-type]
                tools=[
                    {
                        "type": "function",
                        "function": {k: FUNCTION[k] for k in FUNCTION if k != "type"},
                    }
                ],  # type: ignore[list-item]
                reasoning_effort="low",
                stream_options={"include_usage": True},
            ) as stream:
                final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    function = choice.message.tool_calls[0].function  # type: ignore[union-attr]
    assert (function.name, function.arguments) == ("get_weather", '{"city": "Paris"}')
    assert getattr(choice.message, "reasoning_content", None) == "I should look it up."
    assert final.usage is not None
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (31, 12)
