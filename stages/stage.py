"""The three kinds of stage in a turn, one protocol each.

| kind | what it is | who uses it |
|---|---|---|
| :class:`Transformer` (in a :class:`Transform`) | sans-IO: ``feed(batch)`` returns items, ``end()`` flushes | the built-in stages (hooks, encode, SSE parse, decode, output parse) |
| :class:`Source` | for an input batch, an async generator of batches, made by I/O | the transport (one batch per network read), the engine (one per wake-up) |
| :data:`Stage` | an actor ``async def stage(receive, send)`` on two memory channels | a user's stage |

The runner (:mod:`cuca.stages.runner`) runs the same objects either fused into the
consumer's pull or each as its own actor; none of them knows which.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from typing import Any, Generic, TypeAlias, TypeVar

import attrs

from cuca.turn import Stage as Stage

__all__ = ["PASS", "Source", "Stage", "Tap", "Transform", "Transformer", "tapped"]

In = TypeVar("In")
Out = TypeVar("Out")



class Transformer(Generic[In, Out]):
    """A built-in stage of one turn: a batch in, items out; ``end`` once the input has
    ended, for what it still holds.

    ``done`` turns true once it wants no more input (the decoder, after the provider's
    end marker and a short drain): the runner then stops what feeds it (the response is
    closed) and ends the turn normally. ``feed`` and ``end`` are coroutines only so that
    plugin hooks can await; they do no I/O. A transformer that raises ends the turn.
    """

    done: bool = False

    async def feed(self, batch: Sequence[In], /) -> Sequence[Out]:
        raise NotImplementedError

    async def end(self) -> Sequence[Out]:
        return ()


@attrs.frozen
class Transform(Generic[In, Out]):
    """A built-in point as the pipeline holds it: ``new()`` makes its transformer for one
    turn; ``new=None`` is a point with nothing to do this turn (no plugin hooks), left
    out of the run at no cost."""

    new: Callable[[], Transformer[In, Out]] | None = None


PASS: Transform[Any, Any] = Transform()
"""The point that passes its items on untouched."""


@attrs.frozen
class Source(Generic[In, Out]):
    """A built-in point that does I/O: ``open(batch)`` gives the batches it produces for
    one input batch, as an async generator that whoever stops reading early closes
    (``aclose``), which closes what it holds open (the response, the engine's turn)."""

    open: Callable[[Sequence[In]], AsyncGenerator[Sequence[Out], None]]


Built: TypeAlias = Transform[Any, Any] | Source[Any, Any]
"""A built-in point's stage."""


Tap: TypeAlias = Callable[[Sequence[Any]], None]
"""Sees every batch a built-in point writes, in the point's own run: a turn's *during*
seam (:mod:`cuca.seams`). Synchronous and quick; one that raises ends the turn."""


class _Tapped(Transformer[Any, Any]):
    """A point's transformer whose output ``tap`` sees."""

    def __init__(self, inner: Transformer[Any, Any], tap: Tap) -> None:
        self.inner = inner
        self.tap = tap

    @property
    def done(self) -> bool:  # type: ignore[override]
        return self.inner.done

    async def feed(self, batch: Sequence[Any], /) -> Sequence[Any]:
        out = await self.inner.feed(batch)
        if out:
            self.tap(out)
        return out

    async def end(self) -> Sequence[Any]:
        out = await self.inner.end()
        if out:
            self.tap(out)
        return out


class _Passing(Transformer[Any, Any]):
    async def feed(self, batch: Sequence[Any], /) -> Sequence[Any]:
        return batch


def tapped(stage: Built, tap: Tap) -> Built:
    """``stage`` with ``tap`` called on every batch it writes: in the point's own run
    (fused with its neighbours, or its own task as an actor), never a stage or a task of
    its own."""
    if isinstance(stage, Source):
        opened = stage.open

        async def open_tapped(batch: Sequence[Any]) -> AsyncGenerator[Sequence[Any], None]:
            async with aclosing(opened(batch)) as batches:
                async for out in batches:
                    tap(out)
                    yield out

        return Source(open_tapped)
    new = stage.new if stage.new is not None else _Passing
    return Transform(lambda: _Tapped(new(), tap))
