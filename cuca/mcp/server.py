"""A session with one MCP server, whose tools become :class:`cuca.Tool` objects.

The protocol is the official SDK's (``mcp``: its transports, ``ClientSession`` and
types); this module opens a session in the caller's task (the SDK's tasks in a nursery
there, :mod:`cuca.mcp.connection`), lists tools (following pagination, kept until the
server says the list changed) and maps each call's result to the text the model reads.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pydantic
import trio
from mcp import MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from cuca.errors import McpError
from cuca.tools import Tool, ToolFailed

from .connection import Connection
from .content import result_text
from .stderr import StderrTail

__all__ = ["McpServer"]

CONNECT_TIMEOUT = 30.0
"""Seconds a server has to answer ``initialize`` (a first ``uvx`` run downloads first)."""


class McpServer:
    """A running session with one MCP server (open it with :meth:`stdio` or :meth:`http`).

    ``name``, ``version`` and ``protocol_version`` are what the server said in the
    handshake. :meth:`tools` gives its tools for :func:`cuca.run_tools`; one session
    serves concurrent calls. Once the session has ended (the process died, the
    connection was cut) every use raises :class:`~cuca.McpError`.
    """

    def __init__(self, connection: Connection) -> None:
        assert connection.handshake is not None
        self.label = connection.label
        self.name = connection.handshake.server_info.name
        self.version = connection.handshake.server_info.version
        self.protocol_version = connection.handshake.protocol_version
        self._connection = connection

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> AbstractAsyncContextManager[McpServer]:
        """Start ``command args`` as a child process and talk to it on its stdin and
        stdout. ``env`` is added to a minimal inherited environment (``PATH``, ``HOME``...);
        the child's stderr is read, and its last lines go into a start failure's error.
        Leaving the block ends the session and stops the process (its whole group)."""
        parameters = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
        )
        label = " ".join([command, *args])
        stderr = StderrTail()
        return _open(cls, label, _spawn(label, parameters, stderr), connect_timeout, stderr)

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> AbstractAsyncContextManager[McpServer]:
        """Talk to the server at ``url`` over streamable HTTP, sending ``headers`` (an
        ``Authorization`` header, say) with every request. Leaving the block ends the
        session (the server is told with a ``DELETE``)."""
        return _open(cls, url, _http(url, dict(headers or {})), connect_timeout, None)

    async def tools(self, prefix: str | None = None) -> list[Tool]:
        """The server's tools as :class:`cuca.Tool` objects, named ``prefix_name`` with a
        ``prefix``. The list is asked once (every page of it) and kept until the server
        sends ``notifications/tools/list_changed``; the next call then asks again."""
        self._connection.check()
        listed = self._connection.listed
        if listed is None:
            listed = self._connection.listed = await self._list()
        return [self._tool(tool, prefix) for tool in listed]

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Call the server's tool ``name`` and return its result as text. A result with
        ``isError`` (or an error answer) raises :class:`~cuca.tools.ToolFailed` with
        that text, and so does an answer that is not a tool result (the SDK's check of
        its shape, named); a session that has ended raises :class:`~cuca.McpError`."""
        try:
            result = await self._connection.request(lambda s: s.call_tool(name, dict(arguments)))
        except MCPError as exc:
            raise ToolFailed(f"error from the server: {exc.message}") from None
        except pydantic.ValidationError as exc:  # the SDK checks the answer's shape
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            what = f"{where}: {first['msg']}" if where else first["msg"]
            raise ToolFailed(f"the server's answer is not a tool result ({what})") from None
        if not isinstance(result, types.CallToolResult):
            raise ToolFailed(f"the server answered with a {type(result).__name__}")
        if result.is_error:
            raise ToolFailed(result_text(result))
        return result_text(result)

    def _tool(self, listed: types.Tool, prefix: str | None) -> Tool:
        remote = listed.name

        async def function(**arguments: Any) -> str:
            return await self.call_tool(remote, arguments)

        schema = listed.input_schema or {"type": "object"}
        name = model_name(f"{prefix}_{listed.name}" if prefix else listed.name)
        return Tool(name, listed.description or listed.title or "", schema, function)

    async def _list(self) -> list[types.Tool]:
        """Every page of ``tools/list``."""
        listed: list[types.Tool] = []
        seen: set[str] = set()
        cursor: str | None = None
        try:
            while True:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await self._connection.request(lambda s: s.list_tools(params=params))  # noqa: B023
                listed += page.tools
                cursor = page.next_cursor
                if not cursor:
                    return listed
                if cursor in seen:
                    raise McpError(self.label, f"tools/list repeats the cursor {cursor!r}")
                seen.add(cursor)
        except MCPError as exc:
            raise McpError(self.label, f"tools/list failed: {exc.message}") from None


def model_name(name: str) -> str:
    """``name`` as every vendor accepts a tool's name: letters, digits, ``_`` and ``-``,
    at most 64 of them (an MCP name may hold ``.`` or ``/``: ``git.status`` becomes
    ``git_status``). The call still reaches the server under its own name."""
    return _NOT_IN_NAMES.sub("_", name)[:64]


_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_-]")


@asynccontextmanager
async def _open(
    cls: type[McpServer],
    label: str,
    transport: AbstractAsyncContextManager[Any],
    timeout: float,
    stderr: StderrTail | None,
) -> AsyncIterator[McpServer]:
    """Run the connection in a nursery of the caller's task and yield the server once it
    answered ``initialize``. What the block raises comes out as it was (not in a group);
    leaving the block closes the session and waits for the transport to stop."""
    connection = Connection(label, stderr)
    error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        try:
            if stderr is not None:
                nursery.start_soon(stderr.read)
            await nursery.start(connection.run, transport, timeout)
            yield cls(connection)
        except BaseException as exc:  # re-raised below, outside the nursery
            error = exc
        finally:
            connection.close()
            if error is not None and stderr is not None:
                stderr.stop()  # a start failure: the reader may still wait for a grandchild
    if error is not None:
        raise error


@asynccontextmanager
async def _spawn(
    label: str, parameters: StdioServerParameters, stderr: StderrTail
) -> AsyncIterator[Any]:
    """The SDK's stdio transport, a command that cannot start made an :class:`McpError`."""
    transport = stdio_client(parameters, errlog=stderr.child_end)
    try:
        streams = await transport.__aenter__()
    except OSError as exc:
        raise McpError(label, f"cannot start the command: {exc.strerror or exc}") from None
    finally:
        stderr.spawned()  # the child holds its end now (or there is no child)
    try:
        yield streams
    except BaseException as exc:
        if not await transport.__aexit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        await transport.__aexit__(None, None, None)


@asynccontextmanager
async def _http(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport on an HTTP client sending ``headers``."""
    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults: a call may run long
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams
