"""Benchmark an MCP tool call in cuca against the SDK's own call, and a loop step with an
MCP tool against one with a plain Python tool.

Run ``python tests/benchmarks/bench_mcp.py [--calls N] [--steps N]``: one command, one
run. Our test server (``tests/support/mcp_server.py``, the SDK's server side) runs over
stdio; every figure is wall time on one session, the runs taken in turns (alternating which
goes first), best of ``REPEATS``:

- one call: ``await tool.call(arguments)`` on the ``cuca.Tool`` that ``server.tools()``
  gives (what ``run_tools`` awaits for each call: the SDK call, the result mapped to
  text) against ``ClientSession.call_tool`` on the same session (target: at most 1.1x);
- one loop step: ``run_tools`` against the replay server, whose first answer calls
  ``echo`` and whose second answers, with the MCP tool against a Python ``echo``.

Reported: microseconds per call or per loop (two steps), and the ratios. Never part of
pass/fail.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.mcp_servers import SCRIPT, answer_reply, calls_reply

from cuca import CucaClient, ProviderEndpoint, Tool, UnifiedRequest
from cuca.mcp import McpServer
from cuca.testing import RecordedRequest, Reply, open_replay_server

REPEATS = 7
ARGUMENTS = {"text": "hello"}
REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("Echo hello.")


def echo(text: str) -> str:
    """Say the text back (the Python twin of the server's echo)."""
    return text


async def best(runs: list[tuple[str, Callable[[], Awaitable[None]]]]) -> dict[str, float]:
    """The best wall time of each run over ``REPEATS`` rounds, taken in turns (the
    order reversed every other round, so that neither always runs first)."""
    times: dict[str, list[float]] = {name: [] for name, _ in runs}
    for round_number in range(REPEATS):
        for name, run in runs if round_number % 2 else runs[::-1]:
            start = time.perf_counter()
            await run()
            times[name].append(time.perf_counter() - start)
    return {name: min(values) for name, values in times.items()}


def chooser(request: RecordedRequest) -> Reply:
    """A call of ``echo`` first, then an answer once the request carries its result."""
    answered = any(m["role"] == "tool" for m in request.json()["messages"])
    return answer_reply() if answered else calls_reply(("echo", ARGUMENTS))


async def main(calls: int, steps: int) -> None:
    async with McpServer.stdio(sys.executable, [SCRIPT]) as server:
        tools = {tool.name: tool for tool in await server.tools()}
        mcp_echo = tools["echo"]
        session = server._connection._session  # the SDK's own session, for the direct call
        assert session is not None

        async def sdk_calls() -> None:
            for _ in range(calls):
                await session.call_tool("echo", ARGUMENTS)

        async def cuca_calls() -> None:
            for _ in range(calls):
                await mcp_echo.call(ARGUMENTS)

        await sdk_calls()  # warm-up
        call_times = await best([("sdk", sdk_calls), ("cuca", cuca_calls)])

        async with open_replay_server(chooser) as replay:
            url = replay.url
            async with CucaClient(ProviderEndpoint.OPENAI, base_url=url, api_key="k") as c:

                def loops(tool: Tool | Callable[..., Any]) -> Callable[[], Awaitable[None]]:
                    async def run() -> None:
                        for _ in range(steps):
                            async with c.run_tools(REQUEST, [tool]) as stream:
                                async for _item in stream:
                                    pass
                            assert stream.complete

                    return run

                await loops(echo)()  # warm-up
                step_times = await best([("python", loops(echo)), ("mcp", loops(mcp_echo))])

    sdk, ours = (call_times[k] / calls * 1e6 for k in ("sdk", "cuca"))
    print(f"one MCP call over stdio, {calls} calls, best of {REPEATS}:")
    print(f"  ClientSession.call_tool  {sdk:8.1f} us/call")
    print(f"  cuca Tool.call           {ours:8.1f} us/call")
    print(f"  ratio cuca/sdk           {ours / sdk:8.3f}x   (target <= 1.1x)")
    python, mcp = (step_times[k] / steps * 1e6 for k in ("python", "mcp"))
    print(f"\ntool loop, call then answer (2 steps), {steps} loops, best of {REPEATS}:")
    print(f"  Python tool              {python:8.1f} us/loop")
    print(f"  MCP tool                 {mcp:8.1f} us/loop")
    print(f"  ratio mcp/python         {mcp / python:8.3f}x   (+{mcp - python:.1f} us)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--steps", type=int, default=50)
    options = parser.parse_args()
    trio.run(main, options.calls, options.steps)
