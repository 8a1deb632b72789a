"""A turn is an ``async with`` block: the object that says so when it is iterated.

``client.generate_stream(request)`` hands back an async context manager; a user of
another SDK writes ``async for item in client.generate_stream(request)`` and would get
a ``TypeError`` naming a contextlib class. The block refuses that with what to write
instead (a turn owns a response and tasks that only an ``async with`` can close).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Generic, NoReturn, ParamSpec, TypeVar

from .errors import ConfigurationError

__all__ = ["TurnBlock", "turn_block"]

P = ParamSpec("P")
T = TypeVar("T")


class TurnBlock(AbstractAsyncContextManager[T], Generic[T]):
    """The async context manager of a turn; iterating it is a ``ConfigurationError``."""

    __slots__ = ("_manager", "_written")

    def __init__(self, manager: AbstractAsyncContextManager[T], written: str) -> None:
        self._manager = manager
        self._written = written

    async def __aenter__(self) -> T:
        return await self._manager.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self._manager.__aexit__(exc_type, exc, traceback)

    def __aiter__(self) -> NoReturn:
        raise ConfigurationError(
            f"a turn is an async with block: write `async with {self._written} as stream:`, "
            "then `async for item in stream:` (leaving the block closes the turn)"
        )


def turn_block(
    written: str,
) -> Callable[[Callable[P, AbstractAsyncContextManager[T]]], Callable[P, TurnBlock[T]]]:
    """Make a function that returns a turn's context manager return a
    :class:`TurnBlock`; ``written`` is the call as the user writes it."""

    def decorate(
        function: Callable[P, AbstractAsyncContextManager[T]],
    ) -> Callable[P, TurnBlock[T]]:
        @functools.wraps(function)
        def block(*args: P.args, **kwargs: P.kwargs) -> TurnBlock[T]:
            return TurnBlock(function(*args, **kwargs), written)

        return block

    return decorate
