"""Turn observers at work: the stages that show a plugin's :class:`~cuca.TurnObserver`
a whole turn from outside, without changing it.

A plugin that overrides :meth:`CucaPlugin.observe` gets, for each turn, an observer that
sees the request as sent, the raw response bytes (HTTP turns, when it asks for them),
every item the consumer receives (blocks and error items) and how the turn ended: with a
response, an error, or cancelled. The session log and the trace plugin are observers.

Small stages do the watching, placed around the built-in ones: one after
``request_hooks`` (the turn starts), one after ``transport`` (raw bytes, HTTP turns, only
when a plugin sets ``observes_raw``) and one at the very end (items, and the turn's
``EndOfTurn``). The client tells the observers how the turn ended once every stage has
ended, before the consumer sees the end of the stream. A turn without observing plugins
gets none.
Observer methods are synchronous and should be quick: they run inside the turn. One that
raises ends the turn with a :class:`~cuca.errors.PluginError`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import PluginError
from .plugins import BudgetWarning, CucaPlugin, TurnObserver, TurnOutcome, overrides
from .turn import EndOfTurn, TurnState, split_end
from .types import UnifiedRequest

if TYPE_CHECKING:
    from cuca.stages.pipeline import Pipeline
    from cuca.stages.stage import Transform

__all__ = ["watched"]


class _Watch:
    """The observers of one turn, created when the request leaves the request hooks.
    An observer that raises is reported under its plugin's name.

    Observers are created in the context (``contextvars``) of the task that opened the
    turn, which may not be the one that reads it (the tool loop opens a step's turn, its
    consumer reads it): a trace plugin's span has the opener's span for parent."""

    def __init__(self, plugins: Sequence[CucaPlugin], request: UnifiedRequest) -> None:
        self.plugins = plugins
        self.context = contextvars.copy_context()
        self.request = request  # as given, until the request hooks have run
        self.observers: list[tuple[str, TurnObserver]] | None = None
        self.raw: list[tuple[str, TurnObserver]] = []
        self.end_of_turn: EndOfTurn | None = None

    def start(self, request: UnifiedRequest) -> list[tuple[str, TurnObserver]]:
        if self.observers is None:
            self.observers = []
            for plugin in self.plugins:
                try:
                    observer = self.context.run(plugin.observe, request)
                except Exception as exc:
                    raise PluginError.hook_failed(plugin.name, "observe", exc) from exc
                if observer is not None:
                    self.observers.append((plugin.name, observer))
            self.raw = [pair for pair in self.observers if pair[1].raw]
            if request.compaction is not None:
                for name, observer in self.observers:
                    try:
                        observer.on_compaction(request.compaction)
                    except Exception as exc:
                        raise PluginError.hook_failed(name, "on_compaction", exc) from exc
        return self.observers

    def finish(
        self, state: TurnState, cancelled: bool, warnings: Sequence[BudgetWarning] = ()
    ) -> None:
        """Tell every observer the budget ``warnings`` the turn's charge crossed, then how
        the turn ended (called by the client once every stage has, and the turn's gates
        are settled); an observer that fails ends a turn that was not cancelled."""
        if state.error is not None:
            end = TurnOutcome("error", error=state.error)
        elif self.end_of_turn is not None and not cancelled:
            end = TurnOutcome("ok", self.end_of_turn.response())
        else:
            end = TurnOutcome("cancelled")
        failure: PluginError | None = None
        for name, observer in self.start(self.request):
            for warning in warnings:
                try:
                    observer.on_budget_warning(warning)
                except Exception as exc:
                    failure = failure or PluginError.hook_failed(name, "on_budget_warning", exc)
            try:
                observer.on_end(end)
            except Exception as exc:
                failure = failure or PluginError.hook_failed(name, "on_end", exc)
        if failure is not None and end.status != "cancelled":
            state.fail(failure)


def _starting(watch: _Watch) -> Transform[Any, Any]:
    from .stages.stage import Transform, Transformer

    class ObserveStart(Transformer[Any, Any]):
        async def feed(self, batch: Sequence[Any], /) -> Sequence[Any]:
            for request in batch:
                watch.request = request
                watch.start(request)
            return batch

    return Transform(ObserveStart)


def _raw_tap(watch: _Watch) -> Transform[Any, Any]:
    from .stages.stage import Transform, Transformer

    class ObserveRaw(Transformer[Any, Any]):
        async def feed(self, batch: Sequence[Any], /) -> Sequence[Any]:
            chunks = [chunk for chunk in batch if isinstance(chunk, bytes)]
            for name, observer in watch.raw if chunks else ():
                try:
                    observer.on_raw(chunks)
                except Exception as exc:
                    raise PluginError.hook_failed(name, "on_raw", exc) from exc
            return batch

    return Transform(ObserveRaw)


def _ending(watch: _Watch) -> Transform[Any, Any]:
    from .stages.stage import Transform, Transformer

    class ObserveItems(Transformer[Any, Any]):
        async def feed(self, batch: Sequence[Any], /) -> Sequence[Any]:
            items, end = split_end(batch)
            if end is not None:
                watch.end_of_turn = end
            for name, observer in watch.start(watch.request) if items else ():
                try:
                    observer.on_items(items)
                except Exception as exc:
                    raise PluginError.hook_failed(name, "on_items", exc) from exc
            return batch

    return Transform(ObserveItems)


def _after(pipeline: Pipeline, point: str, name: str, stage: Transform[Any, Any]) -> Pipeline:
    """``pipeline`` with the built-in-like ``stage`` right after ``point``: fused, it
    runs with its neighbours (no channel hop), unlike a user's actor."""
    from .stages.pipeline import NamedStage

    return pipeline.placed(pipeline.names.index(point) + 1, NamedStage(name, stage))


def watched(
    pipeline: Pipeline, plugins: Sequence[CucaPlugin], request: UnifiedRequest
) -> tuple[Pipeline, _Watch | None]:
    """``pipeline`` with the observing stages added, when a plugin observes turns, and
    the watch whose ``finish`` the client calls at the end of the turn."""
    observing = [p for p in plugins if overrides(p, "observe")]
    if not observing:
        return pipeline, None
    watch = _Watch(observing, request)
    last = pipeline.names[-1]
    pipeline = _after(pipeline, "request_hooks", "observe_start", _starting(watch))
    if "transport" in pipeline.names and any(p.observes_raw for p in observing):
        pipeline = _after(pipeline, "transport", "observe_raw", _raw_tap(watch))
    return _after(pipeline, last, "observe_items", _ending(watch)), watch
