"""An MCP server of ours, built with the SDK's server side, for the MCP tests and docs.

Run as a script: ``mcp_server.py`` serves on stdio; ``mcp_server.py --http`` serves
streamable HTTP on a free loopback port and prints ``PORT <n>`` once it listens.
``--page-size N`` splits ``tools/list`` into pages of N tools.

Its tools: ``echo(text)``, ``get_weather(city)``, ``add(a, b)`` (structured content
only), ``forecast(city)`` (a text that only points at its structured content),
``picture()`` (an image), ``fail(reason)`` (an ``isError`` result), ``slow()``
(sleeps until cancelled, and counts the calls and the cancellations), ``started()``
(how many slow calls began), ``cancellations()``,
``grow()`` (adds a tool ``extra``, then sends ``notifications/tools/list_changed``),
``die()`` (the process kills itself mid-call), ``pid()``, ``header()``
(the request's ``X-Cuca-Test`` header, over HTTP), ``where()`` (``$CUCA_TEST`` and
the working directory).
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import socket
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _schema(**properties: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
    }


def _tool(name: str, description: str, **properties: str) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=_schema(**properties))


TOOLS = [
    _tool("echo", "Say the text back.", text="string"),
    _tool("get_weather", "Current weather of a city.", city="string"),
    _tool("add", "a + b.", a="number", b="number"),
    _tool("picture", "A 1x1 PNG."),
    _tool("forecast", "Tomorrow's forecast of a city, as structured content.", city="string"),
    _tool("fail", "Always fails.", reason="string"),
    _tool("slow", "Never ends."),
    _tool("started", "How many slow calls began."),
    _tool("cancellations", "How many slow calls were cancelled."),
    _tool("grow", "Add the tool extra."),
    _tool("die", "Kill the server."),
    _tool("pid", "The server's process id."),
    _tool("header", "The X-Cuca-Test header of the HTTP request (HTTP only)."),
    _tool("where", "The CUCA_TEST variable and the working directory."),
]
EXTRA = _tool("extra", "Added by grow.")


class State:
    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.tools = list(TOOLS)
        self.cancelled = 0
        self.started = 0


def text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)])


def build(state: State) -> Server[Any]:
    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + state.page_size
        cursor = str(end) if end < len(state.tools) else None
        return types.ListToolsResult(tools=state.tools[start:end], next_cursor=cursor)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        name = params.name
        if name == "echo":
            return text(args["text"])
        if name == "get_weather":
            return text(f"{args['city']}: 18 C, light rain")
        if name == "add":
            total = {"sum": args["a"] + args["b"]}
            return types.CallToolResult(content=[], structured_content=total)
        if name == "forecast":
            pointer = types.TextContent(type="text", text="See the structured content.")
            value = {"city": args["city"], "celsius": 18}
            return types.CallToolResult(content=[pointer], structured_content=value)
        if name == "picture":
            data = base64.b64encode(PIXEL).decode()
            image = types.ImageContent(type="image", data=data, mime_type="image/png")
            caption = types.TextContent(type="text", text="a pixel:")
            return types.CallToolResult(content=[caption, image])
        if name == "fail":
            refusal = types.TextContent(type="text", text=f"refused: {args['reason']}")
            return types.CallToolResult(content=[refusal], is_error=True)
        if name == "slow":
            state.started += 1
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                state.cancelled += 1
                raise
        if name == "started":
            return text(str(state.started))
        if name == "cancellations":
            return text(str(state.cancelled))
        if name == "grow":
            if EXTRA not in state.tools:
                state.tools.append(EXTRA)
            await ctx.session.send_tool_list_changed()
            return text("grown")
        if name == "extra":
            return text("extra")
        if name == "header":
            return text(ctx.request.headers.get("x-cuca-test", "absent"))
        if name == "where":
            return text(f"{os.environ.get('CUCA_TEST', 'unset')} {os.getcwd()}")
        if name == "pid":
            return text(str(os.getpid()))
        if name == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError(f"unknown tool: {name}")

    return Server("cuca-test", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(server: Server[Any]) -> None:
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


def serve_http(server: Server[Any]) -> None:
    import uvicorn

    app = server.streamable_http_app()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # a client that connects before uvicorn runs waits in the backlog
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--page-size", type=int, default=100)
    args = parser.parse_args()
    print("cuca-test MCP server starting", file=sys.stderr, flush=True)
    server = build(State(args.page_size))
    if args.http:
        serve_http(server)
    else:
        anyio.run(serve_stdio, server)


if __name__ == "__main__":
    main()
