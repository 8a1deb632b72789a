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
    and all of them have ended when this returns. A trio nursery wraps what its body
    raises in an ``ExceptionGroup``; here the block's own exception comes out as it was,
    re-raised outside the nursery.
    """
    body_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        try:
            yield nursery
        except BaseException as exc:  # re-raised below, outside the nursery
            body_error = exc
        finally:
            nursery.cancel_scope.cancel()
    if body_error is not None:
        raise body_error
