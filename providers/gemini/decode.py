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
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from cuca.errors import ProviderError, StreamIncomplete, ToolCallError
from cuca.stages.sse import SseEvent
from cuca.types import (
    FinishReason,
    PromptCacheUsage,
    ProviderEndpoint,
    Text,
    Thinking,
    TokenUsage,
    ToolCall,
    TurnSummary,
    new_call_id,
)

from ..base import Item, StreamDecoder, guarded_feed
from ..controls import finish_fields
from ..decoding import Shape, decode_frame, json_body, stream_error
from .overflow import gemini_overflow

__all__ = ["SYNTHETIC_ID", "GeminiDecoder", "new_call_id"]

GEMINI = ProviderEndpoint.GOOGLE_GEMINI
SYNTHETIC_ID = r"call_[0-9a-f]{16}"
"""The shape of the ids cuca gives function calls that arrived without one."""


# -- the chunk's shape (wire.md section 9), field names in camelCase on the wire ------


class _Shape(Shape, rename="camel"):
    """Gemini's field names are camelCase on the wire (``finishReason``)."""


class _Part(_Shape):
    text: str | None = None
    thought: bool | None = None
    thought_signature: str | None = None
    # Read by hand, whatever its type: a part that names a call is answered by a ToolCall
    # or a ToolCallError, never dropped as a wrongly typed value would be.
    function_call: Any = None  # null, as everywhere, is the field absent


class _Content(_Shape):
    parts: list[_Part] | None = None


class _Candidate(_Shape):
    content: _Content | None = None
    finish_reason: str | None = None


class _Feedback(_Shape):
    block_reason: str | None = None


class _UsageMetadata(_Shape):
    prompt_token_count: int | None = None
    candidates_token_count: int | None = None
    thoughts_token_count: int | None = None
    tool_use_prompt_token_count: int | None = None
    cached_content_token_count: int | None = None


class _Response(_Shape):
    """A ``GenerateContentResponse``, or the error object in its place."""

    candidates: list[_Candidate] | None = None
    usage_metadata: _UsageMetadata | None = None
    prompt_feedback: _Feedback | None = None
    error: Any = None


_RESPONSE = msgspec.json.Decoder(_Response | list[_Response])


GEMINI_FINISH: Mapping[str, FinishReason] = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    **dict.fromkeys(
        (
            "SAFETY",
            "RECITATION",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
            "IMAGE_SAFETY",
            "IMAGE_PROHIBITED_CONTENT",
            "IMAGE_RECITATION",
            "OTHER_SAFETY",  # promptFeedback.blockReason values from here on
            "JAILBREAK",
        ),
        FinishReason.CONTENT_FILTER,
    ),
    **dict.fromkeys(
        ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"),
        FinishReason.ERROR,
    ),
}
"""Gemini's ``finishReason`` (and a blocked prompt's ``blockReason``) values; any other
(``OTHER``, ``LANGUAGE``...) is ``OTHER``. ``STOP`` after a ``functionCall`` part is
``TOOL_CALLS``: Gemini names no reason of its own for a call."""


class GeminiDecoder(StreamDecoder):
    """Decodes one ``streamGenerateContent?alt=sse`` response; ``new_id`` names the
    function calls that arrived without an id."""

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self.finished = False  # never set: Gemini has no end marker, the body ends
        self._new_id = new_id
        self._finish_reason: str | None = None
        self._usage: _UsageMetadata | None = None
        self._called = False  # a functionCall part arrived

    @guarded_feed("gemini")
    def feed(self, event: SseEvent) -> list[Item]:
        if event.event == "error":
            raw = json_body(event.data)
            error = raw.get("error") if isinstance(raw, dict) else None
            message = _raw_error_text(event.data)
            raise stream_error("gemini", message, error, event.data, gemini_overflow)
        payload = decode_frame(_RESPONSE, event.data, "gemini")
        if isinstance(payload, list):
            if not payload:
                raise ProviderError("gemini", f"unexpected frame: {event.data[:200]}")
            payload = payload[0]
        if payload.error is not None:
            message = _error_text(payload.error, event.data)
            raise stream_error("gemini", message, payload.error, event.data, gemini_overflow)
        if payload.usage_metadata is not None:
            self._usage = payload.usage_metadata
        feedback = payload.prompt_feedback
        if feedback is not None and feedback.block_reason:
            self._finish_reason = feedback.block_reason
        if not payload.candidates:
            return []
        candidate = payload.candidates[0]
        content = candidate.content
        items = self._parts(content.parts) if content is not None and content.parts else []
        if candidate.finish_reason:
            self._finish_reason = candidate.finish_reason
        return items

    def close(self) -> list[Item]:
        if self._finish_reason is None:
            raise StreamIncomplete("gemini stream ended before a finishReason")
        return []

    def summary(self) -> TurnSummary:
        usage = self._usage
        finish = finish_fields(self._finish_reason, GEMINI_FINISH, called=self._called)
        if usage is None:
            return TurnSummary(**finish)
        thoughts = usage.thoughts_token_count
        tokens = TokenUsage(
            # tool-use prompt tokens are billed as input but counted apart
            prompt_tokens=(usage.prompt_token_count or 0)
            + (usage.tool_use_prompt_token_count or 0),
            completion_tokens=(usage.candidates_token_count or 0) + (thoughts or 0),
            reasoning_tokens=thoughts,
        )
        cached = usage.cached_content_token_count
        cache = PromptCacheUsage(read_tokens=cached) if cached is not None else None
        return TurnSummary(tokens, cache, **finish)

    def _parts(self, parts: list[_Part]) -> list[Item]:
        return [item for part in parts for item in self._part(part)]

    def _part(self, part: _Part) -> list[Item]:
        signature = part.thought_signature or None
        if part.function_call is not None:
            self._called = True
            return [_call(part.function_call, signature, self._new_id)]
        text = part.text or ""
        if not text and signature is None:
            return []
        if part.thought:
            return [Thinking(text, signature=signature, provider=GEMINI)]
        return [Text(text, signature=signature, provider=GEMINI if signature else None)]


def _call(call: Any, signature: str | None, new_id: Callable[[], str]) -> Item:
    """The part's ``functionCall`` as a call, or a ``ToolCallError`` showing what came
    when it is not an object with a string ``name`` and object ``args``."""
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
            raw=json.dumps(fields["args"]) if "args" in fields else raw,
        )
    return ToolCall(call_id, name, arguments, signature=signature, provider=GEMINI)


def _raw_error_text(raw: str) -> str:
    """The message of the raw JSON object the framer found outside SSE framing."""
    payload = json_body(raw)
    return _error_text(payload.get("error") if isinstance(payload, dict) else None, raw)


def _error_text(error: Any, raw: str) -> str:
    """``status: message`` of a Gemini error object (``{"code", "message", "status"}``)."""
    if not isinstance(error, dict):
        return f"unexpected text outside SSE framing: {raw[:200]}"
    message = str(error.get("message") or "unknown error")
    status = error.get("status") or error.get("code")
    return f"{status}: {message}" if status else message
