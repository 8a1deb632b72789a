"""A nursery for the background tasks of a block, without exception groups."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["background_nursery"]


@asynccontextmanager
async def background_nursery() -> AsyncIterator[trio.Nursery]:
    """Yield a nursery whose tasks serve the ``async with`` block.

    Leaving the block (normally, by an exception or by cancellation) cancels those tasks,
    and all of them have ended when this returns. What comes out:

    | the block | its tasks | raised |
    |---|---|---|
    | fails | end cleanly (or cancelled) | the block's exception, as it was (no group) |
    | ends | one or more fail | trio's group of their errors |
    | fails | one or more fail | a group of the block's exception first, then theirs |

    A block cancelled because a task failed raises that task's group. A plain trio
    nursery would wrap what its body raises in an ``ExceptionGroup`` (and, when a task
    failed too, keep only the group, losing the body's exception).
    """
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield nursery
            except BaseException as exc:  # re-raised below, outside the nursery
                body_error = exc
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if body_error is None or isinstance(body_error, trio.Cancelled):
            raise  # the block was cancelled (by a failing task, or from outside)
        both = BaseExceptionGroup(
            "the block and its background tasks failed", [body_error, *group.exceptions]
        )
        raise both from None
    if body_error is not None:
        raise body_error
