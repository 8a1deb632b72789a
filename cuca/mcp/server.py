"""A session with one MCP server, whose tools become :class:`cuca.Tool` objects.

The protocol is the official SDK's (``mcp``: its transports, ``ClientSession`` and
types); this module opens a session in the caller's task, turns start failures into
:class:`~cuca.McpError`, lists tools (following pagination, kept until the server says
the list changed) and maps each call's result to the text the model reads.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import trio
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client

from cuca._nursery import background_nursery
from cuca.errors import McpError
from cuca.tools import Tool, ToolFailed

from .content import result_text
from .stderr import StderrTail

__all__ = ["McpServer"]

CONNECT_TIMEOUT = 30.0
"""Seconds a server has to answer ``initialize`` (a first ``uvx`` run downloads first)."""

_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
"""What the SDK's streams raise once the other side is gone."""


class McpServer:
    """A running session with one MCP server (open it with :meth:`stdio` or :meth:`http`).

    ``name``, ``version`` and ``protocol_version`` are what the server said in the
    handshake. :meth:`tools` gives its tools for :func:`cuca.run_tools`; one session
    serves concurrent calls. Once the session has ended (the process died, the
    connection was cut) every use raises :class:`~cuca.McpError`.
    """

    def __init__(
        self,
        label: str,
        session: ClientSession,
        handshake: types.InitializeResult,
        stderr: StderrTail | None,
        listing: _Listing,
    ) -> None:
        self.label = label
        self.name = handshake.server_info.name
        self.version = handshake.server_info.version
        self.protocol_version = handshake.protocol_version
        self._session = session
        self._stderr = stderr
        self._listing = listing
        self._ended: str | None = None

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
        return _open_stdio(cls, label, parameters, connect_timeout)

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
        return _open_http(cls, url, dict(headers or {}), connect_timeout)

    async def tools(self, prefix: str | None = None) -> list[Tool]:
        """The server's tools as :class:`cuca.Tool` objects, named ``prefix_name`` with a
        ``prefix``. The list is asked once (every page of it) and kept until the server
        sends ``notifications/tools/list_changed``; the next call then asks again."""
        self._check_usable()
        listed = self._listing.tools
        if listed is None:
            listed = self._listing.tools = await self._list()
        return [self._tool(tool, prefix) for tool in listed]

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Call the server's tool ``name`` and return its result as text. A result with
        ``isError`` (or an error answer) raises :class:`~cuca.tools.ToolFailed` with
        that text; a session that has ended raises :class:`~cuca.McpError`."""
        self._check_usable()
        try:
            result = await self._session.call_tool(name, dict(arguments))
        except MCPError as exc:
            self._raise_lost(exc)
            raise ToolFailed(f"error from the server: {exc.message}") from None
        except _LOST as exc:
            self._raise_lost(exc)
            raise
        if not isinstance(result, types.CallToolResult):
            raise ToolFailed(f"the server answered with a {type(result).__name__}")
        if result.is_error:
            raise ToolFailed(result_text(result))
        return result_text(result)

    def _tool(self, listed: types.Tool, prefix: str | None) -> Tool:
        call = functools.partial(self.call_tool, listed.name)

        async def function(**arguments: Any) -> str:
            return await call(arguments)

        schema = listed.input_schema or {"type": "object"}
        name = f"{prefix}_{listed.name}" if prefix else listed.name
        return Tool(name, listed.description or listed.title or "", schema, function)

    async def _list(self) -> list[types.Tool]:
        """Every page of ``tools/list``."""
        listed: list[types.Tool] = []
        seen: set[str] = set()
        cursor: str | None = None
        try:
            while True:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await self._session.list_tools(params=params)
                listed += page.tools
                cursor = page.next_cursor
                if not cursor:
                    return listed
                if cursor in seen:
                    raise McpError(self.label, f"tools/list repeats the cursor {cursor!r}")
                seen.add(cursor)
        except MCPError as exc:
            self._raise_lost(exc)
            raise McpError(self.label, f"tools/list failed: {exc.message}") from None
        except _LOST as exc:
            self._raise_lost(exc)
            raise

    def _check_usable(self) -> None:
        if self._ended is not None:
            raise McpError(self.label, self._ended, self._stderr_lines())

    def _raise_lost(self, exc: BaseException) -> None:
        """Raise :class:`McpError` (and keep the session ended) if ``exc`` says the
        connection is gone; return for any other error."""
        if isinstance(exc, MCPError) and exc.code != types.CONNECTION_CLOSED:
            return
        self._ended = "the session has ended: the server closed the connection"
        raise McpError(self.label, self._ended, self._stderr_lines()) from None

    def _stderr_lines(self) -> tuple[str, ...]:
        return self._stderr.lines() if self._stderr is not None else ()


class _Listing:
    """The server's tool list as last asked, forgotten when the server says it changed."""

    def __init__(self) -> None:
        self.tools: list[types.Tool] | None = None

    async def on_message(self, message: IncomingMessage) -> None:
        """The SDK's message handler (it gets every notification the server sends)."""
        if isinstance(message, types.ToolListChangedNotification):
            self.tools = None


@asynccontextmanager
async def _open_stdio(
    cls: type[McpServer], label: str, parameters: StdioServerParameters, timeout: float
) -> AsyncIterator[McpServer]:
    stderr = StderrTail()
    async with background_nursery() as nursery:
        nursery.start_soon(stderr.read)
        transport = _spawn(label, parameters, stderr)
        async with _session(cls, label, transport, timeout, stderr) as server:
            yield server


@asynccontextmanager
async def _spawn(
    label: str, parameters: StdioServerParameters, stderr: StderrTail
) -> AsyncIterator[Any]:
    """The SDK's stdio transport, its start failure made an :class:`McpError`."""
    try:
        transport = stdio_client(parameters, errlog=stderr.child_end)
        streams = await transport.__aenter__()
    except OSError as exc:
        raise McpError(label, f"cannot start the command: {exc.strerror or exc}") from None
    finally:
        stderr.spawned()
    try:
        yield streams
    except BaseException as exc:
        if not await transport.__aexit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        await transport.__aexit__(None, None, None)


@asynccontextmanager
async def _open_http(
    cls: type[McpServer], url: str, headers: dict[str, str], timeout: float
) -> AsyncIterator[McpServer]:
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with _session(cls, url, transport, timeout, None) as server:
            yield server


@asynccontextmanager
async def _session(
    cls: type[McpServer],
    label: str,
    transport: AbstractAsyncContextManager[Any],
    timeout: float,
    stderr: StderrTail | None,
) -> AsyncIterator[McpServer]:
    """Open the transport and the SDK's session, shake hands within ``timeout``, and
    yield the server. What the block raises comes out as it was (not in a group)."""
    error: BaseException | None = None
    listing = _Listing()
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(transport)
        session = ClientSession(read, write, message_handler=listing.on_message)
        await stack.enter_async_context(session)
        try:
            handshake = await _handshake(label, session, timeout, stderr)
            yield cls(label, session, handshake, stderr, listing)
        except BaseException as exc:  # re-raised below, once the session is closed
            error = exc
    if error is not None:
        raise error


async def _handshake(
    label: str, session: ClientSession, timeout: float, stderr: StderrTail | None
) -> types.InitializeResult:
    """``initialize``, or an :class:`McpError` saying why it did not answer."""
    what: str
    with trio.move_on_after(timeout):
        try:
            return await session.initialize()
        except MCPError as exc:
            what = f"initialize failed: {exc.message}"
        except (*_LOST, RuntimeError) as exc:
            what = f"initialize failed: {exc}"
        if stderr is not None:
            with trio.move_on_after(0.5):  # the exit's last words may still be in the pipe
                await stderr.closed.wait()
        lines = stderr.lines() if stderr is not None else ()
        raise McpError(label, what, lines)
    lines = stderr.lines() if stderr is not None else ()
    raise McpError(label, f"no answer to initialize within {timeout:g} s", lines)
