"""Gemini's stream, decoded into blocks.

Every event is a whole ``GenerateContentResponse``; only the first candidate is read.

==============================  =============================================
part                            item
==============================  =============================================
``{"text", "thought": true}``   ``Thinking(text, signature, GOOGLE_GEMINI)``
``{"text"}``                    ``Text(text, signature)`` (tagged when signed)
``{"functionCall"}``            ``ToolCall(id, name, args, signature)``
``{"thoughtSignature"}`` only   ``Text("", signature)``
==============================  =============================================

A part's ``thoughtSignature`` stays on the item made from that part, even an empty
text part, so the turn can be replayed part for part. ``usageMetadata`` is a running
total on every chunk (the last wins). Gemini has no end marker: the body ends after a
chunk with a ``finishReason`` (a usage-only chunk may still follow), and a body that
ends before any finishReason was cut.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cuca.errors import ProviderError, StreamIncomplete, ToolCallError
from cuca.stages.sse import SseEvent
from cuca.types import (
    PromptCacheUsage,
    ProviderEndpoint,
    Text,
    Thinking,
    TokenUsage,
    ToolCall,
    TurnSummary,
    new_call_id,
)

from .base import Item, StreamDecoder, guarded_feed, loads_json
from .decoding import json_body, read_int

__all__ = ["SYNTHETIC_ID", "GeminiDecoder", "new_call_id"]

GEMINI = ProviderEndpoint.GOOGLE_GEMINI
SYNTHETIC_ID = r"call_[0-9a-f]{16}"
"""The shape of the ids cuca gives function calls that arrived without one."""


class GeminiDecoder(StreamDecoder):
    """Decodes one ``streamGenerateContent?alt=sse`` response; ``new_id`` names the
    function calls that arrived without an id."""

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self.finished = False  # never set: Gemini has no end marker, the body ends
        self._new_id = new_id
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None

    @guarded_feed("gemini")
    def feed(self, event: SseEvent) -> list[Item]:
        if event.event == "error":
            raise ProviderError("gemini", _raw_error_text(event.data))
        payload = loads_json(event.data, "gemini")
        if isinstance(payload, list) and payload:
            payload = payload[0]
        if not isinstance(payload, dict):
            raise ProviderError("gemini", f"unexpected frame: {event.data[:200]}")
        if "error" in payload:
            raise ProviderError("gemini", _error_text(payload, event.data))
        usage = payload.get("usageMetadata")
        if isinstance(usage, dict):
            self._usage = usage
        feedback = payload.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            self._finish_reason = str(feedback["blockReason"])
        candidates = payload.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            return []
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            return []
        items = self._parts(candidate.get("content"))
        if candidate.get("finishReason"):
            self._finish_reason = str(candidate["finishReason"])
        return items

    def close(self) -> list[Item]:
        if self._finish_reason is None:
            raise StreamIncomplete("gemini stream ended before a finishReason")
        return []

    def summary(self) -> TurnSummary:
        usage = self._usage
        if usage is None:
            return TurnSummary(finish_reason=self._finish_reason)
        thoughts = _count(usage, "thoughtsTokenCount")
        tokens = TokenUsage(
            # tool-use prompt tokens are billed as input but counted apart
            prompt_tokens=(_count(usage, "promptTokenCount") or 0)
            + (_count(usage, "toolUsePromptTokenCount") or 0),
            completion_tokens=(_count(usage, "candidatesTokenCount") or 0) + (thoughts or 0),
            reasoning_tokens=thoughts,
        )
        cached = _count(usage, "cachedContentTokenCount")
        cache = PromptCacheUsage(read_tokens=cached) if cached is not None else None
        return TurnSummary(tokens, cache, self._finish_reason)

    def _parts(self, content: Any) -> list[Item]:
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            return []
        return [item for part in parts if isinstance(part, dict) for item in self._part(part)]

    def _part(self, part: dict[str, Any]) -> list[Item]:
        signature = part.get("thoughtSignature") or None
        if not isinstance(signature, str):
            signature = None
        if "functionCall" in part:
            return [_call(part["functionCall"], signature, self._new_id)]
        text = part.get("text")
        text = text if isinstance(text, str) else ""
        if not text and signature is None:
            return []
        if part.get("thought"):
            return [Thinking(text, signature=signature, provider=GEMINI)]
        return [Text(text, signature=signature, provider=GEMINI if signature else None)]


def _call(call: Any, signature: str | None, new_id: Callable[[], str]) -> Item:
    fields = call if isinstance(call, dict) else {}
    call_id = fields.get("id")
    if not isinstance(call_id, str) or not call_id:
        call_id = new_id()
    name = fields.get("name")
    arguments = fields.get("args")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict) or not isinstance(name, str):
        raw = json.dumps(call)
        return ToolCallError(
            "gemini",
            f"malformed tool call: {raw}",
            tool_call_id=call_id,
            name=name if isinstance(name, str) else None,
            raw=json.dumps(fields.get("args")) if "args" in fields else raw,
        )
    return ToolCall(call_id, name, arguments, signature=signature, provider=GEMINI)


def _count(usage: dict[str, Any], key: str) -> int | None:
    return read_int(usage.get(key))


def _raw_error_text(raw: str) -> str:
    """The message of the raw JSON object the framer found outside SSE framing."""
    payload = json_body(raw)
    return _error_text(payload if isinstance(payload, dict) else {}, raw)


def _error_text(payload: dict[str, Any], raw: str) -> str:
    error = payload.get("error")
    if not isinstance(error, dict):
        return f"unexpected text outside SSE framing: {raw[:200]}"
    message = str(error.get("message") or "unknown error")
    status = error.get("status") or error.get("code")
    return f"{status}: {message}" if status else message
