"""The last lines an MCP server wrote on its stderr (``cuca.mcp.stderr``), without a child.

docs/mcp.md, "Connecting": cuca reads the child's stderr and keeps the last 20 lines for
error messages (``McpError.stderr``). Here the test writes into the child's end itself.
"""

from __future__ import annotations

import trio
import trio.testing
from trio.testing import MockClock

from cuca.mcp.stderr import StderrTail


async def tail_of(written: bytes, keep: int | None = None) -> tuple[str, ...]:
    """The lines kept of ``written``, once the child's end is closed (the child exited)."""
    tail = StderrTail() if keep is None else StderrTail(keep)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tail.read)
        tail.child_end.buffer.write(written)
        tail.child_end.flush()
        tail.spawned()
    assert tail.closed.is_set()
    return tail.lines()


async def test_mcp_stderr_keeps_the_last_twenty_lines() -> None:
    written = "".join(f"line {n}\n" for n in range(25)).encode()
    assert await tail_of(written) == tuple(f"line {n}" for n in range(5, 25))


async def test_mcp_stderr_keeps_as_many_lines_as_asked_the_unfinished_one_included() -> None:
    assert await tail_of(b"a\nb\nc\nd\ne\nunfinished", keep=3) == ("d", "e", "unfinished")
    assert await tail_of(b"a\nb\nunfinished", keep=5) == ("a", "b", "unfinished")
    assert await tail_of(b"a\nb\nc\n", keep=2) == ("b", "c")


async def test_mcp_stderr_blank_lines_are_not_kept() -> None:
    assert await tail_of(b"\nfirst\n   \n\r\nsecond\n  ") == ("first", "second")


async def test_mcp_stderr_lines_keep_their_indent_lose_their_line_end() -> None:
    written = b"Traceback (most recent call last):\r\n  File 'srv.py', line 3  \nError: x"
    assert await tail_of(written) == (
        "Traceback (most recent call last):",
        "  File 'srv.py', line 3",
        "Error: x",
    )


async def test_mcp_stderr_bad_utf8_is_replaced_and_long_lines_cut() -> None:
    lines = await tail_of(b"caf\xe9 au lait\n" + b"x" * 400 + b"\n" + b"y" * 400)
    assert lines == ("caf\ufffd au lait", "x" * 300, "y" * 300)


async def test_mcp_stderr_stop_reads_what_is_left_then_ends_half_a_second_later(
    mock_clock: MockClock,
) -> None:
    """A grandchild may hold the pipe open after the child is stopped: what was written
    is still read, and the reading ends half a second after ``stop``, not at the end of
    the stream (which never comes)."""
    tail = StderrTail()
    tail.child_end.write("last words\n")
    tail.child_end.flush()
    async with trio.open_nursery() as nursery:
        tail.stop()
        nursery.start_soon(tail.read)
        await trio.testing.wait_all_tasks_blocked()
        assert tail.lines() == ("last words",)
        mock_clock.jump(0.4)
        await trio.testing.wait_all_tasks_blocked()
        assert not tail.closed.is_set()
        mock_clock.jump(0.1)
        await trio.testing.wait_all_tasks_blocked()
        assert tail.closed.is_set()
        nursery.cancel_scope.cancel()  # (only if the reading did not end)
    tail.child_end.close()
