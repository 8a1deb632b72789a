"""The request controls every wire maps its own way (``stop``, ``seed``, ``top_p``,
``tool_choice``) and the finish reason every decoder reports: what the adapters check
and decide the same way, so that a control is refused, dropped or sent by one rule
(docs/unified.md has the table per backend).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuca.errors import ConfigurationError
from cuca.types import FinishReason, ToolChoice, ToolChoiceMode, UnifiedRequest

__all__ = ["finish_fields", "forced", "no_stop", "stop_sequences", "tool_choice"]


def stop_sequences(request: UnifiedRequest, who: str, limit: int | None = None) -> list[str]:
    """The request's stop sequences to send (empty: send none); more than ``limit`` is a
    ``ConfigurationError`` naming ``who``, which would refuse them after the round trip."""
    stop = list(request.stop)
    if limit is not None and len(stop) > limit:
        raise ConfigurationError(
            f"{who} takes at most {limit} stop sequences, not {len(stop)}"
        )
    return stop


def no_stop(request: UnifiedRequest, who: str) -> None:
    """Refuse stop sequences where the wire has none: an answer that ran past them
    would not be the answer asked for."""
    if request.stop:
        raise ConfigurationError(
            f"{who} has no stop sequences: remove stop ({len(request.stop)} set), or use "
            "the chat wire (OpenAiConfig(api=OpenAiApi.CHAT))"
        )


def tool_choice(request: UnifiedRequest) -> ToolChoice | None:
    """The tool choice to send, checked against the request's tools: ``None`` when unset,
    and for ``AUTO`` or ``NONE`` without tools (there is nothing to choose, and OpenAI
    refuses a ``tool_choice`` without tools)."""
    choice = request.tool_choice
    if choice is None:
        return None
    choice.check(request.tools)
    if not request.tools:
        return None
    return choice


def forced(choice: ToolChoice | None) -> bool:
    """Whether ``choice`` makes the model call a tool (``REQUIRED`` or a named tool)."""
    return choice is not None and choice.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.TOOL)


def finish_fields(
    raw: str | None, reasons: Mapping[str, FinishReason], *, called: bool = False
) -> dict[str, Any]:
    """``finish_reason`` and ``provider_finish_reason`` of a :class:`~cuca.TurnSummary`:
    the wire's ``raw`` reason mapped by ``reasons`` (anything else is ``OTHER``), and an
    answer that ``called`` a tool and stopped by itself is ``TOOL_CALLS`` (Gemini says
    ``STOP``, vLLM ``stop`` for a named tool choice)."""
    if raw is None:
        return {"finish_reason": None, "provider_finish_reason": None}
    reason = reasons.get(raw, FinishReason.OTHER)
    if called and reason is FinishReason.STOP:
        reason = FinishReason.TOOL_CALLS
    return {"finish_reason": reason, "provider_finish_reason": raw}
