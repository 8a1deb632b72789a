"""cuca.testing's scripted replies: turns written as cuca blocks, served on loopback in
each wire's framing by the encoders ``cuca serve`` uses, read back by cuca's own
clients through the whole pipeline: what the script says is what the test sees."""

from __future__ import annotations

from typing import Any

import pytest

from cuca import (
    ConfigurationError,
    CucaError,
    PromptCacheUsage,
    RateLimitError,
    RetryPolicy,
    Text,
    Thinking,
    TokenUsage,
    ToolCall,
    ToolResult,
    UnifiedRequest,
)
from cuca.testing import (
    Script,
    ScriptedError,
    ScriptedTurn,
    ScriptExhausted,
    open_scripted_server,
)

ASK = UnifiedRequest.new("m").add_user_message("Weather in Paris?")
CALL = ToolCall("call_1", "get_weather", {"city": "Paris"})
TOOL_WIRES = ["chat", "responses", "anthropic", "gemini"]
ALL_WIRES = [*TOOL_WIRES, "llamacpp"]


def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"{city}: 18 C"


@pytest.mark.parametrize("wire", ALL_WIRES)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_scripted_text_and_usage_reach_the_client(wire: str, stream: bool) -> None:
    turn = ScriptedTurn(["Hello", " world"], usage=TokenUsage(12, 2))
    async with open_scripted_server([turn], wire) as server:  # type: ignore[arg-type]
        async with server.client() as client:
            done = await client.generate(ASK.set_stream(stream))
    assert done.text == "Hello world" and done.finish_reason is not None
    # the native route reports no usage: the client counts a token per Text block
    usage = done.usage if wire != "llamacpp" else done.response.counted_usage
    assert usage is not None and usage.completion_tokens == 2
    if wire != "llamacpp":
        assert usage.prompt_tokens == 12 and usage.total_tokens == 14
    assert len(server.requests) == 1


@pytest.mark.parametrize("wire", TOOL_WIRES)
async def test_scripted_tool_loop_runs_the_call_and_sends_the_result(wire: str) -> None:
    script = [CALL, "It is 18 C in Paris."]
    async with open_scripted_server(script, wire) as server:  # type: ignore[arg-type]
        async with server.client() as client:
            async with client.run_tools(ASK, [get_weather]) as stream:
                items: list[Any] = [item async for item in stream]
    calls = [item for item in items if isinstance(item, ToolCall)]
    assert [(c.name, dict(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    results = [item for item in items if isinstance(item, ToolResult)]
    assert [r.output for r in results] == ["Paris: 18 C"]
    assert stream.conversation.messages[-1].text() == "It is 18 C in Paris."
    assert len(server.requests) == 2 and server.script.served == 2
    assert "Paris: 18 C" in server.requests[1].body.decode()  # the result went back


@pytest.mark.parametrize(
    ("wire", "thinking"),
    [
        ("anthropic", Thinking("Paris is in France.", signature="sig-1")),
        ("gemini", Thinking("Paris is in France.", signature="sig-1")),
        ("responses", Thinking("Paris is in France.")),
        ("chat", Thinking("Paris is in France.")),
        ("anthropic", Thinking("Paris is in France.")),
    ],
)
async def test_scripted_thinking_with_and_without_a_signature(
    wire: str, thinking: Thinking
) -> None:
    """Signed thinking comes back signed on the wires that carry signatures (tagged with
    the client's provider, so it is replayed to it); unsigned thinking stays unsigned."""
    turn = ScriptedTurn([thinking, "Paris."], usage=TokenUsage(5, 9, 6))
    async with open_scripted_server([turn], wire) as server:  # type: ignore[arg-type]
        async with server.client() as client:
            done = await client.generate(ASK)
    (got,) = [b for b in done.blocks if isinstance(b, Thinking)]
    assert (got.text, got.signature) == (thinking.text, thinking.signature)
    if thinking.signature is not None:
        assert got.provider == server.provider
    assert done.text == "Paris."
    assert done.usage is not None and done.usage.completion_tokens == 9


@pytest.mark.parametrize("wire", ALL_WIRES)
async def test_scripted_error_status_is_the_wires_error(wire: str) -> None:
    script = [ScriptedError(429, "slow down")]
    async with open_scripted_server(script, wire) as server:  # type: ignore[arg-type]
        async with server.client(retry=RetryPolicy.never()) as client:
            with pytest.raises(RateLimitError) as caught:
                await client.generate(ASK)
    assert caught.value.status == 429 and "slow down" in str(caught.value)


@pytest.mark.parametrize("wire", ALL_WIRES)
async def test_scripted_error_inside_the_stream_after_the_blocks(wire: str) -> None:
    turn = ScriptedTurn(["Par"], error=ScriptedError(500, "the model crashed"))
    async with open_scripted_server([turn], wire) as server:  # type: ignore[arg-type]
        async with server.client(retry=RetryPolicy.never()) as client:
            seen: list[Any] = []
            with pytest.raises(CucaError) as caught:
                async with client.generate_stream(ASK) as stream:
                    async for item in stream:
                        seen.append(item)
    assert "the model crashed" in str(caught.value)
    assert [item.text for item in seen if isinstance(item, Text)] == ["Par"]


async def test_scripted_cut_by_max_tokens_and_cache_usage() -> None:
    turn = ScriptedTurn(
        "Once upon", usage=TokenUsage(40, 2), prompt_cache_usage=PromptCacheUsage(32, 0),
        finish_reason="length",
    )  # fmt: skip
    async with open_scripted_server([turn], "chat") as server:
        async with server.client() as client:
            done = await client.generate(ASK)
    assert done.finish_reason == "length"
    assert done.response.prompt_cache_usage == PromptCacheUsage(32, 0)


async def test_scripted_request_past_the_last_turn_fails_the_test() -> None:
    with pytest.raises(BaseException) as caught:
        async with open_scripted_server(["only one"]) as server:
            async with server.client(retry=RetryPolicy.never()) as client:
                await client.generate(ASK)
                await client.generate(ASK)
    exhausted = caught.value
    while isinstance(exhausted, BaseExceptionGroup):
        exhausted = exhausted.exceptions[0]
    assert isinstance(exhausted, ScriptExhausted)
    assert "request 2 (POST /v1/chat/completions) came after the script's 1 turn(s)" in str(
        exhausted
    )


def test_scripted_script_refuses_what_the_wire_cannot_carry() -> None:
    with pytest.raises(ConfigurationError, match="carries text only, not ToolCall"):
        Script([CALL], "llamacpp")
    with pytest.raises(ConfigurationError, match="no wire 'grpc'"):
        Script(["hi"], "grpc")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not int"):
        ScriptedTurn([Text("a"), 3])  # type: ignore[list-item]


async def test_scripted_completion_stream_ends_as_llama_servers_does() -> None:
    """The ``/completion`` script's last frame has what llama-server's has (wire.md
    section 7): ``stop: true``, empty content, the prompt's and the answer's counts
    and ``timings`` (cache reads, tokens evaluated, tokens predicted), and no
    ``[DONE]`` after it."""
    import json

    import httpx

    turn = ScriptedTurn(
        ["Par", "is"], usage=TokenUsage(40, 2), prompt_cache_usage=PromptCacheUsage(32, 0)
    )
    async with open_scripted_server([turn], "llamacpp") as server, httpx.AsyncClient() as http:
        body = {"prompt": "The capital of France is", "stream": True}
        answer = await http.post(f"{server.url}/completion", json=body)
    lines = [line for line in answer.text.split("\n") if line]
    frames = [json.loads(line.removeprefix("data: ")) for line in lines]
    assert [f["content"] for f in frames] == ["Par", "is", ""]
    last = frames[-1]
    assert last["stop"] is True and last["stop_type"] == "eos"
    assert (last["tokens_evaluated"], last["tokens_predicted"]) == (40, 2)
    timings = last["timings"]
    assert (timings["cache_n"], timings["prompt_n"], timings["predicted_n"]) == (32, 8, 2)
    assert {"prompt_ms", "predicted_ms", "predicted_per_second"} <= set(timings)
