"""A session with an MCP server (``cuca.mcp.server`` and ``cuca.mcp.connection``),
against a scripted server on the SDK's in-memory transport: no process, no socket.

docs/mcp.md, "Connecting", "Tools" and "Timeouts, cancellation, a server that dies":
the handshake's names, the start failures' messages, every page of ``tools/list`` kept
until ``list_changed``, the tools' names and what a call raises once the session ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
import trio
import trio.testing
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage

from cuca import McpError
from cuca.mcp.connection import Connection, _leaf
from cuca.mcp.server import McpServer, _open, model_name
from cuca.tools import ToolFailed

Handler = Callable[[dict[str, Any]], Any]


class Refuse(Exception):
    """A handler's error answer: ``code`` and ``message``."""

    def __init__(self, message: str, code: int = types.INVALID_PARAMS) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Script:
    """A server that answers each method with its handler's result (a handler raising
    :class:`Refuse` answers with an error; one returning ``None`` never answers)."""

    def __init__(self, **handlers: Handler) -> None:
        self.handlers: dict[str, Handler] = {
            "initialize": lambda params: {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "scripted", "version": "1.2.3"},
            },
            "tools/list": lambda params: {"tools": []},
            **{name.replace("__", "/"): handler for name, handler in handlers.items()},
        }
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.read: Any = None
        self.write: Any = None

    async def serve(self, read: Any, write: Any) -> None:
        self.read, self.write = read, write
        async with trio.open_nursery() as nursery:
            async for received in read:
                message = received.message
                if isinstance(message, types.JSONRPCRequest):
                    self.requests.append((message.method, message.params or {}))
                    nursery.start_soon(self.answer, message)

    async def answer(self, request: types.JSONRPCRequest) -> None:
        handler = self.handlers.get(request.method, lambda params: None)
        answer: types.JSONRPCMessage
        try:
            result = handler(request.params or {})
        except Refuse as refusal:
            error = types.ErrorData(code=refusal.code, message=refusal.message)
            answer = types.JSONRPCError(jsonrpc="2.0", id=request.id, error=error)
        else:
            if result is None:
                return
            answer = types.JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result)
        await self.write.send(SessionMessage(answer))

    async def notify(self, method: str) -> None:
        note = types.JSONRPCNotification(jsonrpc="2.0", method=method, params=None)
        await self.write.send(SessionMessage(note))

    def asked(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.requests if name == method]


@asynccontextmanager
async def memory(script: Script) -> AsyncIterator[Any]:
    """A transport: the client's end of in-memory streams, ``script`` at the other."""
    async with create_client_server_memory_streams() as (client, server):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(script.serve, *server)
            yield client
            nursery.cancel_scope.cancel()


def session(script: Script, timeout: float = 10.0) -> Any:
    return _open(McpServer, "scripted --flag", memory(script), timeout, None)


def tool(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}, **fields}


class Tail:
    """A stand-in for the child's stderr tail: its last lines, stopped at the end."""

    def __init__(self, *lines: str) -> None:
        self._lines = lines
        self.closed = trio.Event()
        self.stopped = False
        self._stop = trio.Event()

    def lines(self) -> tuple[str, ...]:
        return self._lines

    def stop(self) -> None:
        self.stopped = True
        self._stop.set()

    async def read(self) -> None:
        await self._stop.wait()


# -- the handshake and start failures ---------------------------------------------------


async def test_mcp_session_server_names_itself_in_the_handshake() -> None:
    async with session(Script()) as server:
        assert (server.name, server.version) == ("scripted", "1.2.3")
        assert server.protocol_version == "2025-06-18"
        assert server.label == "scripted --flag"


async def test_mcp_session_initialize_error_answer_is_an_mcp_error() -> None:
    def refuse(params: dict[str, Any]) -> Any:
        raise Refuse("unsupported client")

    with pytest.raises(McpError) as raised:
        async with session(Script(initialize=refuse)):
            pytest.fail("the block ran without a session")
    assert str(raised.value) == "mcp error (scripted --flag): initialize failed: unsupported client"
    assert raised.value.server == "scripted --flag"


async def test_mcp_session_no_answer_to_initialize_within_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script(initialize=lambda params: None)
    with pytest.raises(McpError) as raised:
        async with session(script, timeout=0.25):
            pytest.fail("the block ran without a session")
    assert str(raised.value) == "mcp error (scripted --flag): no answer to initialize within 0.25 s"


async def test_mcp_session_transport_that_cannot_open_is_cannot_connect() -> None:
    @asynccontextmanager
    async def refused() -> AsyncIterator[Any]:
        raise ExceptionGroup("transport", [ConnectionRefusedError("refused by 127.0.0.1")])
        yield

    with pytest.raises(McpError) as raised:
        async with _open(McpServer, "http://127.0.0.1:9/mcp", refused(), 10.0, None):
            pytest.fail("the block ran without a session")
    message = "cannot connect: ConnectionRefusedError: refused by 127.0.0.1"
    assert str(raised.value) == f"mcp error (http://127.0.0.1:9/mcp): {message}"


async def test_mcp_session_transports_own_mcp_error_comes_out_as_it_was() -> None:
    own = McpError("x", "cannot start the command: No such file or directory")

    @asynccontextmanager
    async def missing() -> AsyncIterator[Any]:
        raise own
        yield

    with pytest.raises(McpError) as raised:
        async with _open(McpServer, "x", missing(), 10.0, None):
            pytest.fail("the block ran without a session")
    assert raised.value is own


async def test_mcp_session_exception_of_the_block_comes_out_as_raised() -> None:
    with pytest.raises(KeyError, match="mine"):
        async with session(Script()):
            raise KeyError("mine")


# -- tools -------------------------------------------------------------------------------


async def test_mcp_session_tools_are_the_servers_name_description_and_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    listed = [
        tool("weather", description="The weather.", inputSchema=schema),
        tool("titled", title="A title"),
        tool("bare"),
    ]
    async with session(Script(tools__list=lambda params: {"tools": listed})) as server:
        tools = await server.tools()
    assert [(t.name, t.description) for t in tools] == [
        ("weather", "The weather."),
        ("titled", "A title"),
        ("bare", ""),
    ]
    assert tools[0].schema == schema


async def test_mcp_session_tool_names_with_a_prefix_keep_the_servers_name_for_the_call() -> None:
    listed = [tool("git.status")]
    answer = {"content": [{"type": "text", "text": "clean"}]}
    script = Script(tools__list=lambda params: {"tools": listed}, tools__call=lambda p: answer)
    async with session(script) as server:
        (plain,) = await server.tools()
        (prefixed,) = await server.tools(prefix="repo")
        assert (plain.name, prefixed.name) == ("git_status", "repo_git_status")
        assert await prefixed.function(path="/src") == "clean"
    assert script.asked("tools/call")[0]["name"] == "git.status"
    assert script.asked("tools/call")[0]["arguments"] == {"path": "/src"}


def test_mcp_session_model_name_keeps_letters_digits_underscore_and_dash() -> None:
    assert model_name("git.status/v2 now") == "git_status_v2_now"
    assert model_name("Az09_-") == "Az09_-"
    assert model_name("é") == "_"
    assert model_name("x" * 70) == "x" * 64


async def test_mcp_session_tools_follow_every_page_of_the_list() -> None:
    pages = {
        None: {"tools": [tool("one")], "nextCursor": "page-2"},
        "page-2": {"tools": [tool("two")], "nextCursor": "page-3"},
        "page-3": {"tools": [tool("three")], "nextCursor": ""},
    }
    script = Script(tools__list=lambda params: pages[params.get("cursor")])
    async with session(script) as server:
        assert [t.name for t in await server.tools()] == ["one", "two", "three"]
    assert [params.get("cursor") for params in script.asked("tools/list")] == [
        None,
        "page-2",
        "page-3",
    ]


async def test_mcp_session_tools_list_that_repeats_a_cursor_is_an_mcp_error() -> None:
    pages = {
        None: {"tools": [tool("one")], "nextCursor": "a"},
        "a": {"tools": [tool("two")], "nextCursor": "b"},
        "b": {"tools": [tool("three")], "nextCursor": "a"},
    }
    script = Script(tools__list=lambda params: pages[params.get("cursor")])
    async with session(script) as server:
        with pytest.raises(McpError) as raised:
            await server.tools()
    assert str(raised.value) == "mcp error (scripted --flag): tools/list repeats the cursor 'a'"
    assert len(script.asked("tools/list")) == 3


async def test_mcp_session_tools_list_error_answer_is_an_mcp_error() -> None:
    def refuse(params: dict[str, Any]) -> Any:
        raise Refuse("no tools today")

    async with session(Script(tools__list=refuse)) as server:
        with pytest.raises(McpError) as raised:
            await server.tools()
    assert str(raised.value) == "mcp error (scripted --flag): tools/list failed: no tools today"


async def test_mcp_session_list_is_kept_until_the_server_says_it_changed() -> None:
    lists = iter([[tool("old")], [tool("new")]])
    script = Script(tools__list=lambda params: {"tools": next(lists)})
    async with session(script) as server:
        assert [t.name for t in await server.tools()] == ["old"]
        assert [t.name for t in await server.tools()] == ["old"]
        assert len(script.asked("tools/list")) == 1
        await script.notify("notifications/resources/list_changed")
        await script.notify("notifications/tools/list_changed")
        with trio.fail_after(10):  # a bound on the wait, not a verdict: it is seen at once
            while server._connection.listed is not None:
                await trio.sleep(0)
        assert [t.name for t in await server.tools()] == ["new"]
    assert len(script.asked("tools/list")) == 2


async def test_mcp_session_other_notifications_keep_the_list() -> None:
    script = Script(
        tools__list=lambda params: {"tools": [tool("kept")]},
        tools__call=lambda params: {"content": []},
    )
    async with session(script) as server:
        await server.tools()
        await script.notify("notifications/resources/list_changed")
        assert await server.call_tool("echo", {}) == ""  # a round trip after the note
        asked = len(script.asked("tools/list"))  # (the SDK may list to check the call)
        assert [t.name for t in await server.tools()] == ["kept"]
        assert len(script.asked("tools/list")) == asked


# -- calls -------------------------------------------------------------------------------


async def test_mcp_session_call_result_is_its_text() -> None:
    answer = {"content": [{"type": "text", "text": "12:00"}], "structuredContent": {"h": 12}}
    script = Script(tools__call=lambda params: answer)
    async with session(script) as server:
        assert await server.call_tool("now", {"tz": "UTC"}) == '12:00\n{"h": 12}'
    assert script.asked("tools/call") == [{"name": "now", "arguments": {"tz": "UTC"}}]


async def test_mcp_session_is_error_result_is_a_tool_failure_with_its_text() -> None:
    answer = {"content": [{"type": "text", "text": "no such city"}], "isError": True}
    async with session(Script(tools__call=lambda params: answer)) as server:
        with pytest.raises(ToolFailed) as raised:
            await server.call_tool("weather", {})
    assert str(raised.value) == "no such city"


async def test_mcp_session_error_answer_to_a_call_is_a_tool_failure() -> None:
    def refuse(params: dict[str, Any]) -> Any:
        raise Refuse("Unknown tool: nope", code=types.METHOD_NOT_FOUND)

    async with session(Script(tools__call=refuse)) as server:
        with pytest.raises(ToolFailed) as raised:
            await server.call_tool("nope", {})
    assert str(raised.value) == "error from the server: Unknown tool: nope"


async def test_mcp_session_answer_that_is_not_a_tool_result_is_a_tool_failure() -> None:
    """A call's answer the SDK cannot read as a tool result (a text block without its
    text) is a ToolFailed naming what is wrong, as an error answer is: the model reads
    that, not a pydantic report of twelve validation errors."""
    answer = {"content": [{"type": "text"}]}
    async with session(Script(tools__call=lambda params: answer)) as server:
        with pytest.raises(ToolFailed) as raised:
            await server.call_tool("now", {})
        with pytest.raises(ToolFailed):  # the session goes on: the next call is asked too
            await server.call_tool("now", {})
    message = str(raised.value)
    assert (
        message
        == "the server's answer is not a tool result (content.0.TextContent.text: Field required)"
    )


async def test_mcp_session_server_gone_mid_call_ends_the_session_for_every_later_use() -> None:
    script = Script(tools__call=lambda params: None)  # never answers
    async with session(script) as server:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                with pytest.raises(McpError) as raised:
                    await server.call_tool("slow", {})
                message = "the session has ended: the server closed the connection"
                assert str(raised.value) == f"mcp error (scripted --flag): {message}"

            nursery.start_soon(call)
            while not script.asked("tools/call"):
                await trio.sleep(0)
            await script.write.aclose()
        with pytest.raises(McpError, match="the session has ended"):
            await server.tools()
        with pytest.raises(McpError, match="the session has ended"):
            await server.call_tool("slow", {})


# -- the connection's own parts ----------------------------------------------------------


def test_mcp_session_leaf_is_the_first_error_inside_the_groups() -> None:
    inner = ExceptionGroup("inner", [OSError("first"), ValueError("second")])
    assert _leaf(ExceptionGroup("outer", [inner, KeyError("k")])) == "OSError: first"
    assert _leaf(TimeoutError()) == "TimeoutError"
    assert _leaf(ValueError("bad")) == "ValueError: bad"


def test_mcp_session_ended_keeps_the_first_reason_and_names_the_stderr() -> None:
    connection = Connection("srv", Tail("boom", "exit 1"))  # type: ignore[arg-type]
    connection.check()
    connection.end("the session has ended: first")
    connection.end("the session has ended: second")
    with pytest.raises(McpError) as raised:
        connection.check()
    assert raised.value.message == "the session has ended: first"
    assert raised.value.stderr == ("boom", "exit 1")
    assert Connection("srv", None).stderr_lines() == ()


async def test_mcp_session_ended_stops_the_requests_in_flight() -> None:
    connection = Connection("srv", None)
    connection._session = object()  # type: ignore[assignment]
    started = trio.Event()

    async def forever(session: Any) -> str:
        started.set()
        await trio.sleep_forever()
        return "never"

    async def request() -> None:
        with pytest.raises(McpError, match="killed"):
            await connection.request(forever)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(request)
        await started.wait()
        connection.end("killed")
    with pytest.raises(McpError, match="killed"):
        await connection.request(forever)


async def test_mcp_session_start_failure_stops_the_stderr_tail_and_shows_it() -> None:
    tail = Tail("config file missing")
    tail.closed.set()

    def refuse(params: dict[str, Any]) -> Any:
        raise Refuse("Connection closed")

    with pytest.raises(McpError) as raised:
        async with _open(McpServer, "srv", memory(Script(initialize=refuse)), 10, tail):  # type: ignore[arg-type]
            pytest.fail("the block ran without a session")
    assert raised.value.stderr == ("config file missing",)
    assert tail.stopped


async def test_mcp_session_server_gone_when_a_call_is_sent_ends_the_session() -> None:
    script = Script(tools__call=lambda params: {"content": []})
    async with session(script) as server:
        await script.read.aclose()  # nothing reads what the client sends
        with pytest.raises(McpError) as raised:
            await server.call_tool("echo", {})
        message = "the session has ended: the server closed the connection"
        assert str(raised.value) == f"mcp error (scripted --flag): {message}"
        with pytest.raises(McpError, match="the server closed the connection"):
            await server.tools()


async def test_mcp_session_leaving_the_block_stops_the_stderr_tail() -> None:
    tail = Tail()
    async with _open(McpServer, "srv", memory(Script()), 10, tail) as server:  # type: ignore[arg-type]
        assert server.name == "scripted"
        assert not tail.stopped
    assert tail.stopped


async def test_mcp_session_start_failure_waits_a_moment_for_the_last_stderr_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tail = Tail("still writing")  # its end never closes: the wait is bounded

    def refuse(params: dict[str, Any]) -> Any:
        raise Refuse("Connection closed")

    with pytest.raises(McpError) as raised:
        async with _open(McpServer, "srv", memory(Script(initialize=refuse)), 10, tail):  # type: ignore[arg-type]
            pytest.fail("the block ran without a session")
    assert raised.value.message == "initialize failed: Connection closed"
    assert raised.value.stderr == ("still writing",)


async def test_mcp_session_stream_gone_under_a_request_ends_the_session() -> None:
    connection = Connection("srv", None)
    connection._session = object()  # type: ignore[assignment]

    async def lost(session: Any) -> str:
        raise anyio.BrokenResourceError

    with pytest.raises(McpError) as raised:
        await connection.request(lost)
    assert raised.value.message == "the session has ended: the server closed the connection"
    assert connection.ended == raised.value.message


async def test_mcp_session_requests_that_ended_are_not_kept() -> None:
    connection = Connection("srv", None)
    connection._session = object()  # type: ignore[assignment]

    async def answer(session: Any) -> str:
        return "done"

    for _ in range(3):
        assert await connection.request(answer) == "done"
    assert not connection._in_flight  # only the requests in flight are cancelled by end()


async def test_mcp_session_initialize_on_streams_that_failed_says_why() -> None:
    class Broken:
        async def initialize(self) -> Any:
            raise RuntimeError("the transport is closed")

    with pytest.raises(McpError) as raised:
        await Connection("srv", None)._initialize(Broken(), 10.0)  # type: ignore[arg-type]
    assert raised.value.message == "initialize failed: the transport is closed"


async def test_mcp_session_no_answer_to_initialize_shows_the_last_stderr_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tail = Tail("loading index...")
    script = Script(initialize=lambda params: None)
    with pytest.raises(McpError) as raised:
        async with _open(McpServer, "srv", memory(script), 30, tail):  # type: ignore[arg-type]
            pytest.fail("the block ran without a session")
    assert raised.value.message == "no answer to initialize within 30 s"
    assert raised.value.stderr == ("loading index...",)
