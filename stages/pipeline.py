"""The turn pipeline as data: named stages, the user's placed among the built-in ones.

A :class:`Pipeline` is an ordered tuple of named stages: a built-in point's
:class:`~cuca.stages.stage.Transform` or :class:`~cuca.stages.stage.Source`, or a user's
actor ``async def stage(receive, send)``, placed with :func:`before` or :func:`after`::

    async def count_bytes(receive, send):
        async with send:
            async for batch in receive:
                counter.add(sum(len(chunk) for chunk in batch if isinstance(chunk, bytes)))
                await send.send(batch)

    client = CucaClient(..., stages=[after("transport", count_bytes)])

:meth:`Pipeline.start` hands it to the runner (:mod:`cuca.stages.runner`), fused or as
actors.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, overload

import attrs

from cuca.errors import ConfigurationError
from cuca.turn import Insertion, TurnState

from . import runner
from .points import Point
from .stage import Built, Stage

__all__ = ["Insertion", "NamedStage", "Pipeline", "Stage", "after", "before"]

T = TypeVar("T")


@attrs.frozen
class NamedStage:
    """A stage and the name other stages are inserted relative to: a built-in point's
    stage, or a user's actor."""

    name: str
    run: Built | Stage[Any, Any]


@overload
def after(point: Point[Any, T], stage: Stage[T, T], name: str | None = ...) -> Insertion[T]: ...
@overload
def after(point: str, stage: Stage[Any, Any], name: str | None = ...) -> Insertion[Any]: ...
def after(
    point: Point[Any, Any] | str, stage: Stage[Any, Any], name: str | None = None
) -> Any:
    """Insert ``stage`` right after ``point`` (a :class:`Point`, or its name): it reads
    and writes what that point writes. ``name`` is what errors call it and what other
    stages are placed relative to; by default :func:`stage_name`."""
    return Insertion(stage, str(point), "after", name or stage_name(stage))


@overload
def before(point: Point[T, Any], stage: Stage[T, T], name: str | None = ...) -> Insertion[T]: ...
@overload
def before(point: str, stage: Stage[Any, Any], name: str | None = ...) -> Insertion[Any]: ...
def before(
    point: Point[Any, Any] | str, stage: Stage[Any, Any], name: str | None = None
) -> Any:
    """Insert ``stage`` right before ``point`` (a :class:`Point`, or its name): it reads
    and writes what that point reads. ``name`` as for :func:`after`."""
    return Insertion(stage, str(point), "before", name or stage_name(stage))


def stage_name(stage: object) -> str:
    """The name of a stage inserted without ``name=``: its function's ``__qualname__``
    (for ``map_items(fn)`` and ``tap(fn)``, ``fn``'s), or its class's for an object
    with a ``__call__`` or ``run`` method, without the ``<locals>`` of an enclosing
    function: ``shout``, ``Counter``; ``"custom"`` when it has none."""
    qualname = getattr(stage, "__qualname__", None)
    if not isinstance(qualname, str):
        qualname = type(stage).__qualname__
    name = qualname.rpartition("<locals>.")[2]
    return name if name and not name.startswith("<") else "custom"


def _stage_tuple(stages: Iterable[NamedStage]) -> tuple[NamedStage, ...]:
    return tuple(stages)


@attrs.frozen
class Pipeline:
    """An ordered tuple of named stages: the shape of one turn."""

    stages: tuple[NamedStage, ...] = attrs.field(converter=_stage_tuple)
    buffer: int = runner.DEFAULT_BUFFER

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self.stages)

    def tasks(self, fused: bool = True) -> tuple[tuple[str, ...], ...]:
        """The stage names each unit of the turn runs: fused, consecutive built-in
        points share one (the last such run is pulled by the consumer's task); as
        actors, every point with something to do is one task."""
        return runner.unit_names(self._pairs(), fused)

    def insert(self, insertion: Insertion[Any]) -> Pipeline:
        """A new pipeline with ``insertion`` placed; unknown points are a configuration
        error naming the points that exist."""
        names = self.names
        if insertion.point not in names:
            known = ", ".join(names)
            raise ConfigurationError(f"no stage named {insertion.point!r} (stages: {known})")
        index = names.index(insertion.point) + (1 if insertion.where == "after" else 0)
        return self.placed(index, NamedStage(insertion.name, insertion.stage))

    def placed(self, index: int, stage: NamedStage) -> Pipeline:
        """A new pipeline with ``stage`` at ``index``."""
        return attrs.evolve(self, stages=(*self.stages[:index], stage, *self.stages[index:]))

    def extended(self, insertions: Iterable[Insertion[Any]]) -> Pipeline:
        pipeline = self
        for insertion in insertions:
            pipeline = pipeline.insert(insertion)
        return pipeline

    def _pairs(self) -> list[tuple[str, Built | Stage[Any, Any]]]:
        return [(stage.name, stage.run) for stage in self.stages]

    def start(
        self, state: TurnState, first: Any, *, fused: bool = True
    ) -> tuple[Callable[[], Awaitable[None]] | None, runner.Puller]:
        """The turn that starts with ``first``: the tasks it needs, as one function to
        run in a nursery (``None`` when it needs none), and the puller its consumer
        reads (see :func:`cuca.stages.runner.start`)."""
        return runner.start(self._pairs(), state, first, fused=fused, buffer=self.buffer)
