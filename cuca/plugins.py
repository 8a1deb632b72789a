"""Plugins: hooks that see every request and every block of a turn.

Subclass :class:`CucaPlugin` and override the hooks you need; hooks run in registration
order. A plugin may also watch a turn from outside (:class:`TurnObserver`) or a tool
loop (:class:`LoopObserver`): the protocols are here, with the hooks, so that the core
and every feature that runs plugins depend on this module alone. Error rules: an
``on_request`` error aborts the turn (raised as :class:`~cuca.errors.PluginError`); an
``on_stream_chunk`` error is yielded as a ``PluginError`` item in place of the block,
which is dropped, and the stream goes on; an ``on_response_complete`` error is yielded
as a ``PluginError`` item at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from decimal import Decimal
from typing import Any, Literal

import attrs

from .errors import CucaError
from .types import (
    Block,
    CompactionReport,
    ToolCall,
    ToolResult,
    UnifiedRequest,
    UnifiedResponse,
)

__all__ = [
    "ApprovalEvent",
    "BudgetWarning",
    "CucaPlugin",
    "LoopObserver",
    "ToolDone",
    "TurnObserver",
    "TurnOutcome",
    "overrides",
]

Status = Literal["ok", "error", "cancelled"]


@attrs.frozen
class TurnOutcome:
    """How a turn ended: ``"ok"`` with its ``response``, ``"error"`` with the ``error``
    that ended it, or ``"cancelled"`` (the consumer left before the end)."""

    status: Status
    response: UnifiedResponse | None = None
    error: Exception | None = None


@attrs.frozen
class BudgetWarning:
    """Spending has crossed ``warn_at`` of a :class:`~cuca.Budget`: ``spent`` of
    ``limit`` in ``unit`` (``"usd"``: ``Decimal`` dollars, as ``response.cost``;
    ``"tokens"``: ints), ``fraction`` = spent / limit.
    Told once per unit per window, for the turn whose charge crossed it."""

    unit: str
    spent: Decimal | int
    limit: Decimal | int
    fraction: float

    def to_dict(self) -> dict[str, Any]:
        """The warning as JSON-ready data (what the session log stores): dollars as
        decimal strings (``"0.000118"``, as the log keeps ``cost``), tokens as ints."""
        return {
            "unit": self.unit,
            "spent": _json_figure(self.spent),
            "limit": _json_figure(self.limit),
            "fraction": self.fraction,
        }


def _json_figure(figure: Decimal | int) -> str | int:
    return f"{figure:f}" if isinstance(figure, Decimal) else figure


class TurnObserver:
    """Watches one turn; every method defaults to doing nothing.

    Set ``raw = True`` to receive the response body's bytes as they arrive (HTTP turns;
    the plugin must also set ``observes_raw = True``).
    """

    raw: bool = False

    def on_raw(self, chunks: Sequence[bytes]) -> None:
        """Body bytes as one network read delivered them (before any parsing)."""

    def on_items(self, items: Sequence[Block | CucaError]) -> None:
        """Items as the consumer receives them: blocks, and errors that did not end the turn."""

    def on_compaction(self, report: CompactionReport) -> None:
        """Called at the start of a turn whose request a compactor shortened
        (``cuca.Compactor``): what it removed, and the tokens before and after."""

    def on_budget_warning(self, warning: BudgetWarning) -> None:
        """Called when this turn's charge made a :class:`~cuca.Budget`'s spending cross
        its ``warn_at`` fraction (once per unit per window, across every process
        sharing its store), before :meth:`on_end`."""

    def on_end(self, end: TurnOutcome) -> None:
        """Called once, whatever happened, before the consumer sees the end of the stream
        (or after it left)."""


ToolDone = Callable[[ToolResult, str | None], None]
"""Told how a call ended: its result and, when it failed, a short error type (the
exception's class name, ``unknown_tool``, ``invalid_arguments``, ``tool_failed`` for a
:class:`~cuca.tools.tool.ToolFailed`, or ``timeout``)."""


ApprovalOutcome = Literal["approved", "edited", "denied", "timeout", "error"]


@attrs.frozen
class ApprovalEvent:
    """A decision on a call that needed approval, as the tool loop records it.

    ``call`` is the call as the model made it; ``outcome`` is ``"approved"``,
    ``"edited"`` (approved with other ``arguments``, which are what ran), ``"denied"``,
    ``"timeout"`` (no decision within ``approval_timeout``) or ``"error"`` (the approver
    raised, or returned something that is not a decision); the last three fail closed:
    the tool did not run. ``by`` names who or what decided (the decision's own ``by``,
    else the approver's name), ``seconds`` how long the decision took, ``reason`` what
    the approver (or the failure) said.
    """

    call: ToolCall
    outcome: ApprovalOutcome
    by: str
    seconds: float
    reason: str | None = None
    arguments: Mapping[str, Any] | None = None

    @property
    def ran(self) -> bool:
        """Whether the tool was allowed to run."""
        return self.outcome in ("approved", "edited")

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready data (what the session log stores)."""
        return {
            "tool_call_id": self.call.id,
            "name": self.call.name,
            "arguments": dict(self.call.arguments),
            "outcome": self.outcome,
            "by": self.by,
            "seconds": self.seconds,
            "reason": self.reason,
            "edited_arguments": None if self.arguments is None else dict(self.arguments),
        }


class LoopObserver:
    """Watches a tool loop from outside; the trace plugin makes spans of it. A plugin
    gives one from :meth:`~cuca.CucaPlugin.observe_tools`. Each method returns a context
    manager the loop holds open around that part, in the task that runs it: what it
    makes current (a span) is current for the turns and tools inside, and an error
    that ends that part passes through it. Every method defaults to doing nothing."""

    def run(self) -> AbstractContextManager[object]:
        """Around the whole loop."""
        return nullcontext()

    def step(self, number: int) -> AbstractContextManager[object]:
        """Around step ``number`` (from 1): its turn, then its calls."""
        return nullcontext()

    def tool_call(self, call: ToolCall) -> AbstractContextManager[ToolDone | None]:
        """Around one call; may give a function told how it ended."""
        return nullcontext()

    def approval(self, event: ApprovalEvent) -> None:
        """A call that needed approval was decided on; called inside that call's
        :meth:`tool_call` (in its task), before the tool runs or is refused."""


class CucaPlugin:
    """Base class of plugins; every hook defaults to doing nothing."""

    name: str = "plugin"
    observes_raw: bool = False
    """Whether this plugin's observers want the raw response bytes (``TurnObserver.raw``);
    the tap on the transport's output is only put in a turn when some plugin says so."""

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        """Return the request to send (possibly a changed copy). ``request.provider`` is
        already the client's provider."""
        return request

    async def on_stream_chunk(self, block: Block) -> Block | None:
        """Return the block to pass on, a replacement, or ``None`` to drop it."""
        return block

    async def on_response_complete(self, response: UnifiedResponse) -> None:
        """Called once when the turn ended cleanly, with its terminal record."""

    def observe(self, request: UnifiedRequest) -> TurnObserver | None:
        """Return a :class:`TurnObserver` to watch this turn from outside
        (raw bytes, every item, how it ended), or ``None``. Called once the request hooks
        have run; the session log and the trace plugin use it."""
        return None

    def observe_tools(self, request: UnifiedRequest) -> LoopObserver | None:
        """Return a :class:`LoopObserver` to watch a tool loop run on the
        client (its steps and tool calls), or ``None``. Called when the loop starts, with
        its request (tools declared); the trace plugin uses it."""
        return None


def overrides(plugin: CucaPlugin, hook: str) -> bool:
    """Whether ``plugin`` implements ``hook`` itself (so no-op hooks cost nothing)."""
    return getattr(type(plugin), hook) is not getattr(CucaPlugin, hook)
