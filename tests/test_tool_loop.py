"""The tool loop's rules, over loopback: concurrency, limits, timeouts, failing tools,
``max_steps``, a step that fails, and cancellation that leaves nothing running.

Step 1 is always OpenAI's recorded parallel call (``GetWeatherArgs`` for Edinburgh and
``get_stock_price`` for AAPL); the tools here take those names.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio
from support.transcripts import transcript

from cuca import (
    ConfigurationError,
    CucaClient,
    HttpStatusError,
    MessageRole,
    ProviderEndpoint,
    RetryPolicy,
    Step,
    Text,
    Tool,
    ToolCall,
    ToolCallError,
    ToolFailed,
    ToolResult,
    UnifiedRequest,
)
from cuca.testing import Reply, open_replay_server

CALLS = Reply(transcript("openai/parallel_tool_calls"))
ANSWER = Reply(transcript("openai/text"))
REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("Weather in Edinburgh, and AAPL?")
WEATHER_ID = "call_JMW1whyEaYG438VE1OIflxA2"
STOCK_ID = "call_DNYTawLBoN8fj3KN6qU9N1Ou"


def tools(weather: Callable[..., Any], stock: Callable[..., Any]) -> list[Tool]:
    return [
        Tool("GetWeatherArgs", "Weather.", {"type": "object"}, weather),
        Tool("get_stock_price", "Stock price.", {"type": "object"}, stock),
    ]


async def ok(**arguments: Any) -> str:
    return "ok"


async def run(
    loop_tools: Sequence[Tool | Callable[..., Any]],
    replies: Sequence[Reply] = (CALLS, ANSWER),
    **options: Any,
) -> tuple[list[Any], Any, int]:
    """Run the loop to its end: the items, the stream and how many requests were sent."""
    async with open_replay_server(replies) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=server.url, api_key="k") as c:
            items: list[Any] = []
            async with c.run_tools(REQUEST, loop_tools, **options) as stream:
                async for item in stream:
                    items.append(item)
        return items, stream, len(server.requests)


def results(items: list[Any]) -> dict[str, ToolResult]:
    return {item.tool_call_id: item for item in items if isinstance(item, ToolResult)}


async def test_tool_loop_runs_calls_concurrently() -> None:
    weather_started, stock_started = trio.Event(), trio.Event()

    async def weather(**arguments: Any) -> str:
        weather_started.set()
        await stock_started.wait()  # would deadlock if the calls ran one after the other
        return "rain"

    async def stock(**arguments: Any) -> str:
        stock_started.set()
        await weather_started.wait()
        return "227"

    with trio.fail_after(10):
        items, stream, sent = await run(tools(weather, stock))
    assert {k: r.output for k, r in results(items).items()} == {WEATHER_ID: "rain", STOCK_ID: "227"}
    assert sent == 2 and stream.complete


async def test_tool_loop_concurrency_limit() -> None:
    running, most = 0, 0

    async def tool(**arguments: Any) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await trio.sleep(0.01)
        running -= 1
        return "done"

    await run(tools(tool, tool), max_concurrency=1)
    assert most == 1


async def test_tool_loop_sync_tools_run_in_worker_threads() -> None:
    threads: list[str] = []

    def weather(**arguments: Any) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        return {"sky": "grey", "city": arguments["city"]}

    items, stream, _ = await run(tools(weather, weather))
    assert threading.current_thread().name not in threads and len(threads) == 2
    assert results(items)[WEATHER_ID].output == '{"sky": "grey", "city": "Edinburgh"}'
    # the result the model gets is the one streamed
    tool_messages = [m for m in stream.conversation.messages if m.role is MessageRole.TOOL]
    assert tool_messages[0].content == (results(items)[WEATHER_ID],)


async def test_tool_loop_failing_tool_gives_an_error_result_and_goes_on() -> None:
    async def weather(**arguments: Any) -> str:
        raise LookupError(f"no station in {arguments['city']}")

    items, stream, sent = await run(tools(weather, ok))
    weather_result = results(items)[WEATHER_ID]
    assert weather_result == ToolResult(WEATHER_ID, "LookupError: no station in Edinburgh", True)
    assert results(items)[STOCK_ID] == ToolResult(STOCK_ID, "ok")
    assert sent == 2 and stream.complete  # the model saw the error and answered


async def test_tool_loop_tool_failed_is_an_error_result_of_exactly_its_text() -> None:
    async def weather(**arguments: Any) -> str:
        raise ToolFailed(f"no station in {arguments['city']}")

    items, _, _ = await run(tools(weather, ok), tracebacks=True)
    weather_result = results(items)[WEATHER_ID]
    assert weather_result == ToolResult(WEATHER_ID, "no station in Edinburgh", True)


async def test_tool_loop_tracebacks_on_request() -> None:
    async def weather(**arguments: Any) -> str:
        raise LookupError("no station")

    items, _, _ = await run(tools(weather, ok), tracebacks=True)
    output = results(items)[WEATHER_ID].output
    assert output.startswith("Traceback (most recent call last):")
    assert output.endswith("LookupError: no station")


async def test_tool_loop_unknown_tool_and_bad_arguments_are_error_results() -> None:
    def get_stock_price(ticker: str) -> str:
        return ticker

    items, _, _ = await run([get_stock_price])
    assert results(items) == {
        WEATHER_ID: ToolResult(WEATHER_ID, "unknown tool: GetWeatherArgs", True),
        STOCK_ID: ToolResult(
            STOCK_ID, "invalid arguments: unexpected arguments for get_stock_price: exchange", True
        ),
    }


async def test_tool_loop_timeout_of_an_async_tool() -> None:
    async def slow(**arguments: Any) -> str:
        await trio.sleep_forever()
        raise AssertionError

    items, stream, _ = await run(tools(slow, ok), tool_timeout=0.05)
    assert results(items)[WEATHER_ID] == ToolResult(WEATHER_ID, "timed out after 0.05 s", True)
    assert stream.complete


async def test_tool_loop_timeout_of_a_sync_tool_that_checks() -> None:
    stopped = threading.Event()

    def slow(**arguments: Any) -> str:
        while True:
            try:
                trio.from_thread.check_cancelled()
            except trio.Cancelled:
                stopped.set()
                raise
            threading.Event().wait(0.005)

    items, _, _ = await run(tools(slow, ok), tool_timeout=0.05)
    assert results(items)[WEATHER_ID].output == "timed out after 0.05 s"
    assert stopped.is_set()  # the thread ended before the loop went on


async def test_tool_loop_stops_at_max_steps_with_every_call_answered() -> None:
    items, stream, sent = await run(tools(ok, ok), replies=[CALLS], max_steps=2)
    assert sent == 2 and not stream.complete
    assert [item for item in items if isinstance(item, Step)] == [Step(1), Step(2)]
    last = stream.conversation.messages[-2:]
    assert [m.role for m in last] == [MessageRole.TOOL, MessageRole.TOOL]


async def test_tool_loop_failed_step_is_raised_and_the_conversation_kept() -> None:
    failing = Reply(b'{"error": {"message": "boom"}}', status=500)
    async with open_replay_server([CALLS, failing]) as server:
        retry = RetryPolicy.never()
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url, api_key="k", retry=retry
        ) as client:
            items: list[Any] = []
            with pytest.raises(HttpStatusError) as caught:
                async with client.run_tools(REQUEST, tools(ok, ok)) as stream:
                    async for item in stream:
                        items.append(item)
    assert caught.value.status == 500
    assert items[-1] == Step(2)
    # step 1 and its results stay; the failed step added nothing
    assert [m.role for m in stream.conversation.messages] == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.TOOL,
    ]


@pytest.mark.parametrize("how", ["break", "cancel"])
async def test_tool_loop_leaving_cancels_the_running_tools(how: str) -> None:
    cancelled: list[str] = []
    async_running, sync_running = trio.Event(), threading.Event()

    async def forever(**arguments: Any) -> str:
        async_running.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.append("async")
        raise AssertionError

    def sync_forever(**arguments: Any) -> str:
        sync_running.set()
        while True:
            try:
                trio.from_thread.check_cancelled()
            except trio.Cancelled:
                cancelled.append("sync")
                raise
            threading.Event().wait(0.005)

    async def cancel_once_both_run(scope: trio.CancelScope) -> None:
        await async_running.wait()
        while not sync_running.is_set():
            await trio.sleep(0.005)
        scope.cancel()

    threads_before = threading.active_count()
    async with open_replay_server([CALLS, ANSWER]) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=server.url, api_key="k") as c:
            items: list[Any] = []
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    with trio.CancelScope() as outer:
                        async with c.run_tools(REQUEST, tools(forever, sync_forever)) as stream:
                            with trio.CancelScope() as reading:
                                # "break": stop reading, leave the block while the tools run
                                scope = reading if how == "break" else outer
                                nursery.start_soon(cancel_once_both_run, scope)
                                async for item in stream:
                                    items.append(item)
            assert outer.cancelled_caught == (how == "cancel")
            assert [i for i in items if isinstance(i, ToolCall)][-1].id == STOCK_ID
        await server.wait_connections_closed()
    assert sorted(cancelled) == ["async", "sync"]  # both ended before the block did
    assert len(server.requests) == 1
    assert threading.active_count() <= threads_before + 1  # trio's idle worker may stay
    assert stream.complete is False


async def test_tool_loop_refuses_bad_options() -> None:
    def echo(text: str) -> str:
        return text

    async with CucaClient(ProviderEndpoint.OPENAI, base_url="http://127.0.0.1:9") as client:
        with pytest.raises(ConfigurationError, match="at least 1"):
            async with client.run_tools(REQUEST, [echo], max_steps=0):
                raise AssertionError
        with pytest.raises(ConfigurationError, match="two tools are named 'echo'"):
            async with client.run_tools(REQUEST, [echo, echo]):
                raise AssertionError
        with pytest.raises(ConfigurationError, match="'arguments' cannot be filled by name"):
            async with client.run_tools(REQUEST, [ok]):
                raise AssertionError


async def test_tool_loop_declares_each_tool_once() -> None:
    async def get_stock_price(ticker: str, exchange: str) -> str:
        """Last price."""
        return "1"

    declared = REQUEST.add_tool("get_stock_price", "Declared already.", {"type": "object"})
    async with open_replay_server([ANSWER]) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=server.url, api_key="k") as c:
            async with c.run_tools(declared, [get_stock_price]) as stream:
                texts = [item async for item in stream if isinstance(item, Text)]
        sent = server.requests[0].json()
    assert [t["function"]["description"] for t in sent["tools"]] == ["Declared already."]
    assert "".join(t.text for t in texts) == "I'm unable to provide real-time weather updates."


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "c", "object": "chat.completion.chunk", "choices": [choice]}
    return "data: " + json.dumps(body)


_BAD_CALL = {
    "index": 0,
    "id": "call_bad",
    "type": "function",
    "function": {"name": "GetWeatherArgs", "arguments": "{city: Paris"},
}
MALFORMED_CALL = Reply(
    "\n\n".join(
        [
            _chunk({"role": "assistant", "tool_calls": [_BAD_CALL]}),
            _chunk({}, "tool_calls"),
            "data: [DONE]",
            "",
        ]
    ).encode()
)


async def test_tool_loop_answers_a_call_whose_arguments_are_not_json() -> None:
    """A malformed call is shown to the caller as a ToolCallError, kept in the
    conversation with empty arguments and answered with an error result, so the model
    reads what went wrong and the follow-up request stays valid (every call answered)."""
    ran: list[Any] = []

    async def weather(**arguments: Any) -> str:
        ran.append(arguments)
        return "rain"

    async with open_replay_server((MALFORMED_CALL, ANSWER)) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=server.url, api_key="k") as c:
            items: list[Any] = []
            async with c.run_tools(REQUEST, tools(weather, ok)) as stream:
                async for item in stream:
                    items.append(item)
        follow_up = server.requests[1].json()
    errors = [item for item in items if isinstance(item, ToolCallError)]
    assert [(e.tool_call_id, e.name, e.raw) for e in errors] == [
        ("call_bad", "GetWeatherArgs", "{city: Paris")
    ]
    assert results(items)["call_bad"] == ToolResult(
        "call_bad", "arguments are not a JSON object: {city: Paris", is_error=True
    )
    assert ran == [] and stream.complete
    assistant, answer = follow_up["messages"][1], follow_up["messages"][2]
    assert assistant["tool_calls"][0]["id"] == "call_bad"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {}
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_bad"
