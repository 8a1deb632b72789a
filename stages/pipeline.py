"""The turn pipeline as data: named stage actors wired by bounded memory channels.

A :class:`Pipeline` is an ordered tuple of named stages. Running it opens one nursery,
one bounded channel between each pair of stages, and feeds the first stage a single
batch holding the request. Users extend a pipeline by inserting their own stage before
or after a named point (:func:`before`, :func:`after`)::

    async def count_bytes(receive, send):
        async with send:
            async for batch in receive:
                counter.add(sum(len(chunk) for chunk in batch))
                await send.send(batch)

    client = CucaClient(..., stages=[after("transport", count_bytes)])

Errors: a stage that raises ends the turn. Its error is recorded on the
:class:`TurnContext` (the first one wins), its input channel is closed (upstream stops
quietly) and its output channel is closed (downstream drains what it already has), so
the consumer receives every item produced before the error, then the error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import trio

from cuca.errors import ConfigurationError

from .context import Stage, TurnContext

__all__ = [
    "HTTP_POINTS",
    "LOCAL_POINTS",
    "Insertion",
    "NamedStage",
    "Pipeline",
    "after",
    "before",
]

HTTP_POINTS = ("request_hooks", "encode", "transport", "sse_parse", "decode", "chunk_hooks")
"""The built-in stages of a turn over HTTP, in order."""

LOCAL_POINTS = ("request_hooks", "engine", "output_parse", "chunk_hooks")
"""The built-in stages of a turn on the in-process engine, in order."""

DEFAULT_BUFFER = 1
"""Batches each channel may hold. Small on purpose: a slow consumer slows the transport."""


@attrs.frozen
class NamedStage:
    """A stage actor and the name other stages are inserted relative to."""

    name: str
    run: Stage


@attrs.frozen
class Insertion:
    """A user's stage, to be placed just ``before`` or just ``after`` a named point."""

    stage: Stage
    point: str
    where: str = "after"
    name: str = "custom"


def after(point: str, stage: Stage, name: str = "custom") -> Insertion:
    """Insert ``stage`` right after the stage named ``point``."""
    return Insertion(stage, point, "after", name)


def before(point: str, stage: Stage, name: str = "custom") -> Insertion:
    """Insert ``stage`` right before the stage named ``point``."""
    return Insertion(stage, point, "before", name)


def _stage_tuple(stages: Iterable[NamedStage]) -> tuple[NamedStage, ...]:
    return tuple(stages)


@attrs.frozen
class Pipeline:
    """An ordered tuple of named stages: the shape of one turn."""

    stages: tuple[NamedStage, ...] = attrs.field(converter=_stage_tuple)
    buffer: int = DEFAULT_BUFFER

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self.stages)

    def insert(self, insertion: Insertion) -> Pipeline:
        """A new pipeline with ``insertion`` placed; unknown points are a configuration
        error naming the points that exist."""
        names = self.names
        if insertion.point not in names:
            known = ", ".join(names)
            raise ConfigurationError(f"no stage named {insertion.point!r} (stages: {known})")
        index = names.index(insertion.point) + (1 if insertion.where == "after" else 0)
        new = NamedStage(insertion.name, insertion.stage)
        return attrs.evolve(self, stages=(*self.stages[:index], new, *self.stages[index:]))

    def extended(self, insertions: Iterable[Insertion]) -> Pipeline:
        pipeline = self
        for insertion in insertions:
            pipeline = pipeline.insert(insertion)
        return pipeline

    async def run(self, ctx: TurnContext, first: Any, out: trio.MemorySendChannel[Any]) -> None:
        """Run every stage until the last one closes ``out``.

        ``first`` is sent to the first stage as a one-item batch. Returns when every
        stage has ended; errors are recorded on ``ctx``, never raised.
        """
        send, receive = trio.open_memory_channel[Sequence[Any]](1)
        send.send_nowait([first])
        send.close()
        try:
            await self._run_stages(ctx, receive, out)
        finally:
            ctx.finished.set()

    async def _run_stages(
        self,
        ctx: TurnContext,
        receive: trio.MemoryReceiveChannel[Any],
        out: trio.MemorySendChannel[Any],
    ) -> None:
        async with trio.open_nursery() as nursery:
            for index, stage in enumerate(self.stages):
                if index == len(self.stages) - 1:
                    next_send, next_receive = out, None
                else:
                    next_send, next_receive = trio.open_memory_channel[Sequence[Any]](self.buffer)
                nursery.start_soon(_guarded, stage, receive, next_send, ctx, name=stage.name)
                if next_receive is not None:
                    receive = next_receive


async def _guarded(
    stage: NamedStage,
    receive: trio.MemoryReceiveChannel[Any],
    send: trio.MemorySendChannel[Any],
    ctx: TurnContext,
) -> None:
    """Run one stage; record its error, then close both of its channels.

    The error is recorded before the output channel closes, so whoever sees the end of
    the channel also sees the error.
    """
    with receive:
        async with send:
            try:
                await stage.run(receive, send)
            except trio.BrokenResourceError:
                pass  # downstream stopped listening (it failed or finished): end quietly
            except Exception as exc:
                ctx.fail(exc)
