"""Where the command writes: the answer on stdout, everything else on stderr.

:class:`Console` holds the two streams and what is known about them (terminal or
not, colour allowed or not), so that renderers and commands never call ``isatty``
themselves and tests can hand in plain buffers.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import TextIO

import attrs

__all__ = ["Console", "one_line"]

_SPACE = re.compile(r"\s+")


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space, so that
    an error from a server body still reads as one line."""
    return _SPACE.sub(" ", text).strip()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


@attrs.define
class Console:
    """The command's two output streams.

    ``color`` allows ANSI styling on stdout: true when stdout is a terminal and
    ``NO_COLOR`` is unset. ``err_tty`` allows the animated progress indicator.
    """

    out: TextIO
    err: TextIO
    out_tty: bool = False
    err_tty: bool = False
    color: bool = False

    @classmethod
    def system(cls, env: Mapping[str, str]) -> Console:
        """The process's stdout and stderr, written with replacement characters rather
        than failing on text the terminal's encoding cannot show."""
        out, err = sys.stdout, sys.stderr
        for stream in (out, err):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="backslashreplace")
        out_tty = _isatty(out)
        color = out_tty and not env.get("NO_COLOR")
        return cls(out, err, out_tty, _isatty(err), color)

    def status(self, text: str) -> None:
        """One line on stderr (progress, usage, notes)."""
        self.err.write(text + "\n")
        self.err.flush()

    def warning(self, text: str) -> None:
        """A non-fatal problem, as one ``cuca: warning: ...`` line on stderr."""
        self.status(f"cuca: warning: {one_line(text)}")

    def error(self, text: str) -> None:
        """A fatal problem, as one ``cuca: error: ...`` line on stderr."""
        self.status(f"cuca: error: {one_line(text)}")
