"""Turn observers at work: a plugin's :class:`~cuca.TurnObserver` sees a whole turn from
outside, without changing it.

A plugin that overrides :meth:`CucaPlugin.observe` gets, for each turn, an observer that
sees the request as sent, the raw response bytes (HTTP turns, when it asks for them),
every item the consumer receives (blocks and error items) and how the turn ended: with a
response, an error, or cancelled. The session log and the trace plugin are observers.

No stage does the watching: a :class:`Watch` meets the turn at its seams
(:mod:`cuca.seams`). *Before* the pipeline starts it creates the observers for the
request as the hooks left it; *during* it, the transport's output is tapped for raw
bytes (HTTP turns, only when a plugin sets ``observes_raw``) and the consumer's stream
shows it every batch it receives; *after* the turn, once every stage has ended and
before the consumer sees the end of the stream, it tells the observers how the turn
ended. A turn without observing plugins has no watch.
Observer methods are synchronous and should be quick: they run inside the turn. One that
raises ends the turn with a :class:`~cuca.errors.PluginError`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

from .errors import PluginError
from .plugins import BudgetWarning, CucaPlugin, TurnObserver, TurnOutcome, overrides
from .turn import EndOfTurn, TurnState
from .types import UnifiedRequest

__all__ = ["Watch", "watch"]


class Watch:
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
        self.raw_observers: list[tuple[str, TurnObserver]] = []
        self.end_of_turn: EndOfTurn | None = None

    @property
    def wants_raw(self) -> bool:
        """Whether a plugin asked for the raw response bytes."""
        return any(plugin.observes_raw for plugin in self.plugins)

    def raw(self, batch: Sequence[Any]) -> None:
        """A tap on the transport's output: its bytes to every observer that asked."""
        chunks = [chunk for chunk in batch if isinstance(chunk, bytes)]
        for name, observer in self.raw_observers if chunks else ():
            try:
                observer.on_raw(chunks)
            except Exception as exc:
                raise PluginError.hook_failed(name, "on_raw", exc) from exc

    def items(self, items: Sequence[Any], end: EndOfTurn | None) -> None:
        """What the consumer receives, batch by batch, and the turn's end."""
        if end is not None:
            self.end_of_turn = end
        for name, observer in self.start(self.request) if items else ():
            try:
                observer.on_items(items)
            except Exception as exc:
                raise PluginError.hook_failed(name, "on_items", exc) from exc

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
            self.raw_observers = [pair for pair in self.observers if pair[1].raw]
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


def watch(plugins: Sequence[CucaPlugin], request: UnifiedRequest) -> Watch | None:
    """The watch of one turn, or ``None`` when no plugin observes turns."""
    observing = [p for p in plugins if overrides(p, "observe")]
    return Watch(observing, request) if observing else None
