"""Running MCP servers for the tests: ours (``mcp_server.py``) over stdio or streamable
HTTP, the reference ``mcp-server-time``, and OpenAI replies that call their tools."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from cuca.mcp import McpServer
from cuca.testing import Reply

SCRIPT = str(Path(__file__).resolve().parent / "mcp_server.py")
TIME_SERVER = (sys.executable, ["-m", "mcp_server_time"])
"""The reference server, run by the interpreter it is installed in."""


@asynccontextmanager
async def http_server(*args: str) -> AsyncIterator[str]:
    """Our server on a free loopback port, as a child process: yields its URL."""
    async with http_server_process(*args) as (url, _):
        yield url


@asynccontextmanager
async def http_server_process(*args: str) -> AsyncIterator[tuple[str, trio.Process]]:
    """Our server over HTTP: yields its URL and its process."""
    command = [sys.executable, SCRIPT, "--http", *args]
    async with trio.open_nursery() as nursery:
        run = partial(trio.run_process, command, stdout=subprocess.PIPE, check=False)
        process: trio.Process = await nursery.start(run)
        assert process.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(64)
        try:
            yield f"http://127.0.0.1:{int(line.split()[1])}/mcp", process
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def ours(transport: str, *args: str) -> AsyncIterator[McpServer]:
    """A session with our server over ``transport`` (``stdio`` or ``http``)."""
    if transport == "stdio":
        async with McpServer.stdio(sys.executable, [SCRIPT, *args]) as server:
            yield server
    else:
        async with http_server(*args) as url, McpServer.http(url) as server:
            yield server


def sse(*frames: Any) -> bytes:
    return "".join(
        f"data: {frame if isinstance(frame, str) else json.dumps(frame)}\n\n" for frame in frames
    ).encode()


def calls_reply(*calls: tuple[str, dict[str, Any]]) -> Reply:
    """An OpenAI chat stream whose answer calls each ``(name, arguments)``, with the
    ids ``call_0``, ``call_1``..."""
    tool_calls = [
        {
            "index": index,
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        for index, (name, arguments) in enumerate(calls)
    ]
    delta = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    return Reply(sse({"choices": [{"index": 0, "delta": delta}]}, finish, "[DONE]"))


def answer_reply(text: str = "Done.") -> Reply:
    """An OpenAI chat stream that answers ``text`` and calls nothing."""
    delta = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return Reply(sse(delta, finish, "[DONE]"))


def tool_messages(body: dict[str, Any]) -> dict[str, str]:
    """The tool results an OpenAI chat request carries: call id -> content."""
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
