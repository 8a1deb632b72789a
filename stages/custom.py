"""Small builders for user stages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from cuca.turn import EndOfTurn

from .items import ResponseHead
from .pipeline import Stage

__all__ = ["map_items", "tap"]

T = TypeVar("T")

_CONTROL = (EndOfTurn, ResponseHead)
"""Items that carry the turn itself: ``map_items`` passes them on untouched."""


def map_items(fn: Callable[[T], T | None]) -> Stage[T, T]:
    """A stage that replaces each item with ``fn(item)``, dropping it when ``fn`` returns
    ``None``. Between ``decode`` and ``chunk_hooks`` the items are blocks and errors;
    between ``transport`` and ``sse_parse`` they are ``bytes`` chunks. The turn's own
    records (the ``ResponseHead``, the ``EndOfTurn``) pass on without ``fn`` seeing them."""

    async def mapped(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            out = [item if isinstance(item, _CONTROL) else fn(item) for item in batch]
            out = [item for item in out if item is not None]
            if out:
                await send.send(out)

    mapped.__qualname__ = _name_of(fn, "map_items")  # the stage is named after fn
    return mapped


def tap(fn: Callable[[T], Awaitable[None] | None]) -> Stage[T, T]:
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

    tapped.__qualname__ = _name_of(fn, "tap")
    return tapped


def _name_of(fn: object, default: str) -> str:
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) and not name.endswith("<lambda>") else default
