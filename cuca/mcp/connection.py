"""The SDK's transport and ``ClientSession``, run in a task of their own.

The SDK's transports run tasks of their own in a task group around whatever uses them;
a task that fails there (an HTTP request refused once the server is gone) would cancel
that code, the caller's loop included. So the transport and the session live in one
task of the server's nursery, which catches such a failure and ends the session
instead: the calls in flight end with :class:`~cuca.McpError`, and so does every use
after.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import anyio
import mcp_types as types
import trio
from mcp import ClientSession, MCPError
from mcp.client.session import IncomingMessage

from cuca.errors import McpError

from .stderr import StderrTail

__all__ = ["Connection"]

T = TypeVar("T")

_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
"""What the SDK's streams raise once the other side is gone."""


class Connection:
    """One session with a server: its handshake, its state, its requests in flight."""

    def __init__(self, label: str, stderr: StderrTail | None) -> None:
        self.label = label
        self.stderr = stderr
        self.handshake: types.InitializeResult | None = None
        self.listed: list[types.Tool] | None = None  # forgotten on tools/list_changed
        self.ended: str | None = None
        self._session: ClientSession | None = None
        self._closing = trio.Event()
        self._in_flight: set[trio.CancelScope] = set()

    async def run(
        self,
        transport: AbstractAsyncContextManager[Any],
        timeout: float,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Open the transport and the session, shake hands within ``timeout``, then
        serve until :meth:`close`. A start failure is raised (an :class:`McpError`);
        a failure after the start ends the session."""
        started = False
        try:
            async with transport as (read, write):
                session = ClientSession(read, write, message_handler=self._on_message)
                async with session:
                    self.handshake = await self._initialize(session, timeout)
                    self._session = session
                    task_status.started()
                    started = True
                    await self._closing.wait()
        except Exception as exc:  # the transport failed (often in an exception group)
            first = _first(exc)
            if isinstance(first, McpError):  # ours, from the handshake, through the
                raise first from None  # transport's task group (HTTP's wraps it)
            if not started:
                what = f"cannot connect: {_leaf(exc)}"
                raise McpError(self.label, what, self.stderr_lines()) from None
            self.end(f"the session has ended: {_leaf(exc)}")
        finally:
            if self.stderr is not None:
                self.stderr.stop()
            if not self._closing.is_set():
                self.end(self.ended or "the session has ended")

    def close(self) -> None:
        """Leave the session (the transport stops the process or ends the HTTP session)."""
        self._closing.set()

    async def request(self, send: Callable[[ClientSession], Awaitable[T]]) -> T:
        """``send(session)``, or :class:`McpError` if the session has ended or ends
        meanwhile. An error answer from the server is raised as the SDK's ``MCPError``."""
        self.check()
        assert self._session is not None
        with trio.CancelScope() as scope:
            self._in_flight.add(scope)
            try:
                return await send(self._session)
            except MCPError as exc:
                if exc.code != types.CONNECTION_CLOSED:
                    raise
                self.end("the session has ended: the server closed the connection")
            except _LOST:
                self.end("the session has ended: the server closed the connection")
            finally:
                self._in_flight.discard(scope)
        self.check()
        raise AssertionError("unreachable: a request ended without a result")

    def check(self) -> None:
        """Raise :class:`McpError` once the session has ended."""
        if self.ended is not None:
            raise McpError(self.label, self.ended, self.stderr_lines())

    def end(self, reason: str) -> None:
        """Mark the session ended and stop the requests in flight."""
        if self.ended is None:
            self.ended = reason
        for scope in self._in_flight:
            scope.cancel()

    def stderr_lines(self) -> tuple[str, ...]:
        return self.stderr.lines() if self.stderr is not None else ()

    async def _initialize(self, session: ClientSession, timeout: float) -> types.InitializeResult:
        """``initialize``, or an :class:`McpError` saying why it did not answer."""
        what: str
        with trio.move_on_after(timeout):
            try:
                return await session.initialize()
            except MCPError as exc:
                what = f"initialize failed: {exc.message}"
            except (*_LOST, RuntimeError) as exc:
                what = f"initialize failed: {exc}"
            if self.stderr is not None:
                with trio.move_on_after(0.5):  # the exit's last words may still be in the pipe
                    await self.stderr.closed.wait()
            raise McpError(self.label, what, self.stderr_lines())
        raise McpError(
            self.label, f"no answer to initialize within {timeout:g} s", self.stderr_lines()
        )

    async def _on_message(self, message: IncomingMessage) -> None:
        """The SDK's message handler (it gets every notification the server sends)."""
        if isinstance(message, types.ToolListChangedNotification):
            self.listed = None


def _first(exc: BaseException) -> BaseException:
    """The first error inside ``exc``'s exception groups (``exc`` if it is no group)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _leaf(exc: BaseException) -> str:
    """The first error inside ``exc``'s exception groups, as ``Type: message``."""
    exc = _first(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
