"""Loading a local model off the trio thread, with a sign of life on stderr.

Loading a GGUF file blocks for a while (llama.cpp reads and maps the weights), so it
runs in a worker thread. On a terminal a spinner with the elapsed time turns until
it is done and is then erased; elsewhere (a log, a pipe) one ``loading model ...``
line is written instead, so logs stay free of carriage returns.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import TypeVar

import trio

from .console import Console
from .tasks import run_beside

__all__ = ["load_with_progress"]

T = TypeVar("T")

_FRAMES = "|/-\\"
_CLEAR_LINE = "\r\x1b[K"
_INTERVAL = 0.1


async def load_with_progress(load: Callable[[], T], label: str, console: Console) -> T:
    """Run ``load`` in a thread and return its result, showing progress on stderr."""

    async def in_thread() -> T:
        return await trio.to_thread.run_sync(load)

    if not console.err_tty:
        console.status(f"loading model {label} ...")
        return await in_thread()

    started = time.monotonic()

    async def spin() -> None:
        for frame in itertools.cycle(_FRAMES):
            elapsed = time.monotonic() - started
            console.err.write(f"\r{frame} loading model {label} {elapsed:.1f}s")
            console.err.flush()
            await trio.sleep(_INTERVAL)

    try:
        return await run_beside(in_thread, spin)
    finally:
        console.err.write(_CLEAR_LINE)
        console.err.flush()
