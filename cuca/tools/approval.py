"""Approvals: a person's (or a policy's) decision before a tool that changes the world
runs.

A tool declares that its calls need approval (``Tool(..., needs_approval=True)``, or a
function of the arguments for approval by risk); :func:`cuca.run_tools` asks its
``approve`` callable about each such call and awaits the answer in the call's own task,
so the calls that need none run meanwhile. The rules fail closed: a denial, an approver
that raises or returns something else than a decision, no approver at all, or
``approval_timeout`` passing, and the tool does not run.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from cuca.plugins import ApprovalEvent
from cuca.types import ToolCall

__all__ = ["Approval", "Approver", "decide"]


@attrs.frozen
class Approval:
    """A decision on one call: ``approved`` or not; ``arguments`` to run instead of the
    model's (an edit: they are what runs and what the model is told ran); ``reason``
    (sent to the model with a denial); ``by``, who decided (recorded)."""

    approved: bool
    arguments: Mapping[str, Any] | None = None
    reason: str | None = None
    by: str | None = None

    @classmethod
    def allow(
        cls, *, arguments: Mapping[str, Any] | None = None, by: str | None = None
    ) -> Approval:
        """Run the call (with ``arguments`` instead of the model's, when given)."""
        return cls(True, None if arguments is None else dict(arguments), None, by)

    @classmethod
    def deny(cls, reason: str | None = None, *, by: str | None = None) -> Approval:
        """Do not run the call; the model reads ``denied by approver`` and ``reason``."""
        return cls(False, None, reason, by)


Approver = Callable[[ToolCall], "Approval | bool | Awaitable[Approval | bool]"]
"""What ``run_tools(approve=...)`` takes: called with the call, returns a decision
(an :class:`Approval`, or ``True``/``False``); async, or sync (run in a worker thread)."""


async def decide(
    approve: Approver | None, call: ToolCall, timeout: float | None
) -> ApprovalEvent:
    """Ask ``approve`` about ``call``, within ``timeout`` seconds, and say what was
    decided; never raises (but ``trio.Cancelled``): every failure is a refusal."""
    who = _name(approve)
    started = trio.current_time()

    def event(outcome: Any, reason: str | None = None, **more: Any) -> ApprovalEvent:
        seconds = trio.current_time() - started
        return ApprovalEvent(call, outcome, more.pop("by", None) or who, seconds, reason, **more)

    if approve is None:
        return event("denied", f"{call.name} needs approval and the loop has no approver")
    with trio.move_on_after(float("inf") if timeout is None else timeout) as scope:
        try:
            answer = await _ask(approve, call)
        except Exception as exc:
            return event("error", f"the approver failed: {type(exc).__name__}: {exc}")
    if scope.cancelled_caught:
        return event("timeout", f"no decision within {timeout:g} s")
    if isinstance(answer, bool):
        answer = Approval(answer)
    if not isinstance(answer, Approval):
        return event("error", f"the approver returned {type(answer).__name__}, not a decision")
    if not answer.approved:
        return event("denied", answer.reason, by=answer.by)
    if answer.arguments is not None and dict(answer.arguments) != dict(call.arguments):
        return event("edited", answer.reason, by=answer.by, arguments=dict(answer.arguments))
    return event("approved", answer.reason, by=answer.by)


async def _ask(approve: Approver, call: ToolCall) -> Any:
    """The approver's answer: awaited in this task when it is async; a sync one runs
    in a worker thread, abandoned if the wait is cancelled (a person at a prompt cannot
    be interrupted: the timeout still refuses the call at once, and the late answer is
    ignored)."""
    if inspect.iscoroutinefunction(approve) or inspect.iscoroutinefunction(
        getattr(approve, "__call__", None)  # noqa: B004 (an object whose __call__ is async)
    ):
        return await approve(call)  # type: ignore[misc]
    # boxed: trio refuses a function run in a thread that returns a coroutine, and a
    # sync approver may return one (``Approver``: a lambda around an async function)
    (answer,) = await trio.to_thread.run_sync(lambda: (approve(call),), abandon_on_cancel=True)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer


def _name(approve: Approver | None) -> str:
    if approve is None:
        return "no approver"
    name = getattr(approve, "__qualname__", None) or type(approve).__qualname__
    return str(name)


def refusal(event: ApprovalEvent) -> str:
    """What the model reads when ``event`` did not let its call run."""
    if event.outcome == "denied" and event.reason and "no approver" in event.reason:
        return f"denied: {event.reason}"
    if event.outcome == "denied":
        return "denied by approver" + (f": {event.reason}" if event.reason else "")
    return f"denied: {event.reason}"
