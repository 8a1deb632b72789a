"""Small builders for user stages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .context import Stage

__all__ = ["map_items", "tap"]


def map_items(fn: Callable[[Any], Any]) -> Stage:
    """A stage that replaces each item with ``fn(item)``, dropping it when ``fn`` returns
    ``None``. Between ``decode`` and ``chunk_hooks`` the items are blocks and errors;
    between ``transport`` and ``sse_parse`` they are ``bytes`` chunks."""

    async def mapped(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            out = [new for new in map(fn, batch) if new is not None]
            if out:
                await send.send(out)

    return mapped


def tap(fn: Callable[[Any], Awaitable[None] | None]) -> Stage:
    """A stage that shows each item to ``fn`` (sync or async) and passes it on."""

    async def tapped(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            for item in batch:
                result = fn(item)
                if result is not None:
                    await result
            await send.send(batch)

    return tapped
