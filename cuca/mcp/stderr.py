"""The last lines a child process writes on its standard error, kept for error messages.

The child writes into a pipe; a task reads it and keeps only the last ``keep`` lines, so
a chatty server costs a few kilobytes, and a failed start can say what the server said.
"""

from __future__ import annotations

import collections
import os
from typing import TextIO

import trio

__all__ = ["StderrTail"]


class StderrTail:
    """A pipe for a child's stderr and the last lines read from it."""

    def __init__(self, keep: int = 20) -> None:
        read_fd, write_fd = os.pipe()
        self.child_end: TextIO = open(write_fd, "w", encoding="utf-8")
        self._stream = trio.lowlevel.FdStream(read_fd)
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._partial = b""
        self._scope = trio.CancelScope()
        self.closed = trio.Event()

    def spawned(self) -> None:
        """Close this process's copy of the child's end (once the child holds it), so
        that the reader sees the end of the stream when the child exits."""
        self.child_end.close()

    async def read(self) -> None:
        """Read until the child (and whatever inherited its stderr) closes it, or until
        shortly after :meth:`stop`."""
        with self._scope:
            async with self._stream:
                while chunk := await self._stream.receive_some(4096):
                    *lines, self._partial = (self._partial + chunk).split(b"\n")
                    self._lines.extend(_decode(line) for line in lines if line.strip())
                    self._partial = self._partial[-4096:]
        self.closed.set()

    def stop(self) -> None:
        """The child has been stopped: read what is left for half a second, then stop
        (a grandchild may hold the pipe open)."""
        self._scope.deadline = min(self._scope.deadline, trio.current_time() + 0.5)

    def lines(self) -> tuple[str, ...]:
        """The last lines read, the unfinished one included."""
        tail = [_decode(self._partial)] if self._partial.strip() else []
        return (*self._lines, *tail)[-(self._lines.maxlen or 1) :]


def _decode(line: bytes) -> str:
    return line.decode("utf-8", "replace").rstrip()[:300]
