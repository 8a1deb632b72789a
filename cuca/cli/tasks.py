"""Running one piece of work with helpers beside it, without exception groups.

A trio nursery wraps whatever its body raises in an ``ExceptionGroup``. The command
wants the error of the work itself (a ``CucaError`` to print as one line, a
``KeyboardInterrupt``), so :func:`run_beside` runs the helpers as tasks and the work
in the body of :func:`cuca._nursery.background_nursery`, which re-raises the work's
exception as it was, outside the nursery (as ``CucaClient.generate_stream`` does).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from cuca._nursery import background_nursery

__all__ = ["run_beside"]

T = TypeVar("T")


async def run_beside(
    work: Callable[[], Awaitable[T]], *helpers: Callable[[], Awaitable[None]]
) -> T:
    """Await ``work()`` while ``helpers`` run; cancel the helpers once it returns or
    raises. Helpers must not raise (a helper's error would come out as a group)."""
    async with background_nursery() as nursery:
        for helper in helpers:
            nursery.start_soon(helper)
        return await work()
