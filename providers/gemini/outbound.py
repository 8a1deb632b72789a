"""A turn as Gemini's ``streamGenerateContent?alt=sse`` writes it: one
``GenerateContentResponse`` chunk per item (:class:`GeminiStream`), or one whole
response for ``generateContent`` (:func:`response`).

``cuca serve`` does not answer this wire; ``cuca.testing``'s scripted replies do, in
the framing Gemini's recorded streams have (``reference/wire.md`` section 9):

- Each chunk is ``data: {...}`` ended by ``\\r\\n\\r\\n`` (Gemini frames with CRLF), a
  ``candidates`` list of one candidate whose ``content`` holds the item's part, with
  ``role: model`` and ``index: 0``. There is no end marker: the stream ends after the
  chunk with a ``finishReason``.
- A Text item is ``{"text"}``, a Thinking item ``{"text", "thought": true}``, a
  ToolCall ``{"functionCall": {"id", "name", "args"}}``; a block's signature rides on
  its part as ``thoughtSignature``. A call whose arguments were not an object (a
  :class:`~cuca.errors.ToolCallError` item) goes out with the text the model wrote as
  its ``args``: reported to the client, never dropped.
- The last chunk carries an empty text part, the ``finishReason`` (``STOP``, also after
  a function call, as Gemini says it; ``MAX_TOKENS`` for a cut, ``SAFETY`` for a
  filter) and ``usageMetadata``: ``promptTokenCount``, ``candidatesTokenCount`` (the
  answer without the thoughts), ``thoughtsTokenCount``, ``cachedContentTokenCount``
  and ``totalTokenCount``.
- An error inside the stream is Gemini's: the error object, pretty-printed, outside
  SSE framing (``{"error": {"code", "message", "status"}}``), which the official SDK
  raises and an SSE parser alone would skip.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from typing import Any

from cuca.errors import CucaError, ToolCallError
from cuca.types import Text, Thinking, ToolCall

from ..serving import Ending, ErrorKind, Finish, Item, error_kind, finish_kind

__all__ = [
    "FINISH_REASONS",
    "GeminiStream",
    "error_body",
    "error_object",
    "response",
    "usage_body",
]

FINISH_REASONS: dict[Finish, str] = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}
"""Gemini's ``finishReason`` of each finish (a function call ends with ``STOP``)."""

STATUSES: dict[ErrorKind, str] = {
    "invalid_request": "INVALID_ARGUMENT",
    "authentication": "UNAUTHENTICATED",
    "permission": "PERMISSION_DENIED",
    "not_found": "NOT_FOUND",
    "request_too_large": "INVALID_ARGUMENT",
    "rate_limit": "RESOURCE_EXHAUSTED",
    "timeout": "DEADLINE_EXCEEDED",
    "overloaded": "UNAVAILABLE",
    "server": "INTERNAL",
}
"""The ``error.status`` of each kind of error (Google's canonical codes)."""


def _frame(chunk: dict[str, Any]) -> bytes:
    text = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\r\n\r\n".encode()


def _part(item: Item) -> dict[str, Any] | None:
    """The part an item is, or ``None`` for one with nothing to say."""
    if isinstance(item, ToolCall):
        call = {"id": item.id, "name": item.name, "args": dict(item.arguments)}
        part: dict[str, Any] = {"functionCall": call}
        signature = item.signature
    elif isinstance(item, ToolCallError):
        call = {"id": item.tool_call_id or "", "name": item.name or "", "args": item.raw}
        part, signature = {"functionCall": call}, None
    elif isinstance(item, Thinking) and not item.redacted:
        part, signature = {"text": item.text, "thought": True}, item.signature
    elif isinstance(item, Text):
        part, signature = {"text": item.text}, item.signature
    else:
        return None
    if not signature and part.get("text") == "":
        return None
    if signature:
        part["thoughtSignature"] = signature
    return part


def usage_body(ending: Ending) -> dict[str, Any]:
    """``usageMetadata``: the completion split into the answer (``candidates``) and the
    thoughts, as Gemini counts them, and their total with the prompt."""
    usage, cache = ending.usage, ending.prompt_cache_usage
    prompt = usage.prompt_tokens if usage is not None else 0
    output = usage.completion_tokens if usage is not None else 0
    thoughts = usage.reasoning_tokens if usage is not None else None
    body: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output - (thoughts or 0),
        "totalTokenCount": prompt + output,
    }
    if thoughts is not None:
        body["thoughtsTokenCount"] = thoughts
    if cache is not None and cache.read_tokens:
        body["cachedContentTokenCount"] = cache.read_tokens
    return body


class GeminiStream:
    """Writes one turn as ``streamGenerateContent`` chunks.

    Call :meth:`open` once, :meth:`write` for each item, then :meth:`close` with how the
    turn ended, or :meth:`fail` with the error that ended it; each returns the bytes to
    send (possibly none), as the other wires' streams do.
    """

    def __init__(self, model: str, *, response_id: str | None = None) -> None:
        self.model = model
        self.id = response_id or secrets.token_urlsafe(16)
        self.called = False
        self.done = False

    def _chunk(self, parts: list[dict[str, Any]], **candidate: Any) -> dict[str, Any]:
        content = {"parts": parts, "role": "model"}
        return {
            "candidates": [{"content": content, **candidate, "index": 0}],
            "modelVersion": self.model,
            "responseId": self.id,
        }

    def open(self, input_tokens: int | None = None) -> bytes:
        """Nothing: Gemini's first chunk is the first part."""
        return b""

    def write(self, item: Item) -> bytes:
        """The chunk of one item."""
        if self.done or (part := _part(item)) is None:
            return b""
        self.called = self.called or "functionCall" in part
        return _frame(self._chunk([part]))

    def close(self, ending: Ending) -> bytes:
        """The last chunk: an empty text part, the finish reason and the usage."""
        if self.done:
            return b""
        self.done = True
        reason = FINISH_REASONS[finish_kind(ending.finish_reason, self.called)]
        chunk = self._chunk([{"text": ""}], finishReason=reason)
        return _frame({**chunk, "usageMetadata": usage_body(ending)})

    def fail(self, error: BaseException) -> bytes:
        """The error that ended the turn, as Gemini writes it inside a stream: the error
        object, pretty-printed, outside SSE framing."""
        if self.done:
            return b""
        self.done = True
        return (json.dumps(error_object(error), indent=2) + "\n").encode()


def error_object(error: BaseException, status: int | None = None) -> dict[str, Any]:
    """``{"error": {"code", "message", "status"}}`` for ``error``."""
    code, kind = error_kind(error, status)
    message = error.message if isinstance(error, CucaError) else str(error)
    return {"error": {"code": code, "message": message, "status": STATUSES[kind]}}


def error_body(error: BaseException, status: int | None = None) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of an error answered before any byte of a turn."""
    return error_kind(error, status)[0], error_object(error, status)


def response(
    items: Iterable[Item], ending: Ending, model: str, *, response_id: str | None = None
) -> dict[str, Any]:
    """One ``GenerateContentResponse`` for a whole turn (``generateContent``): every part
    in order, the finish reason and the usage."""
    stream = GeminiStream(model, response_id=response_id)
    parts = [part for item in items if (part := _part(item)) is not None]
    called = any("functionCall" in part for part in parts)
    reason = FINISH_REASONS[finish_kind(ending.finish_reason, called)]
    chunk = stream._chunk(parts, finishReason=reason)
    return {**chunk, "usageMetadata": usage_body(ending)}
