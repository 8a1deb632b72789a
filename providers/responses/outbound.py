"""A served turn as the ``/responses`` wire writes it: the event stream
(:class:`ResponseStream`) or one ``response`` object (:func:`response`).

Event names and fields follow the ``openai`` package's ``types/responses/``; every event
carries a growing ``sequence_number``. A turn is:

- ``response.created`` (status ``in_progress``, no output yet);
- one output item per block run, each ``response.output_item.added``, its deltas and
  ``response.output_item.done``, at contiguous ``output_index`` values:

  - reasoning: a ``reasoning`` item whose text streams as
    ``response.reasoning_text.delta`` (the model's own reasoning, not a summary); its
    ``encrypted_content`` is the sealed signature (see
    :class:`~cuca.providers.serving.Signatures`), its ``id`` the backend's when it
    named one;
  - text: a ``message`` item with one ``output_text`` part
    (``response.content_part.added``, ``response.output_text.delta``...);
  - a tool call: a ``function_call`` item, its arguments in one
    ``response.function_call_arguments.delta`` and ``.done``. A call whose arguments
    were not a JSON object goes out with the text the model wrote, as on the chat
    wire: reported, never dropped;

- ``response.completed``, or ``response.incomplete`` with
  ``incomplete_details.reason: "max_output_tokens"`` for a cut, with the whole output
  and the usage (cache reads in ``input_tokens_details.cached_tokens``, reasoning in
  ``output_tokens_details.reasoning_tokens``).

An error inside the stream is an ``error`` event (``code``, ``message``, ``param``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from typing import Any

from cuca.errors import CucaError, ToolCallError
from cuca.types import ProviderEndpoint, Text, Thinking, ToolCall

from ..serving import (
    PASS_THROUGH,
    Ending,
    ErrorKind,
    Item,
    Signatures,
    error_kind,
    finish_kind,
    sse,
)

__all__ = ["ERROR_CODES", "ResponseStream", "error_body", "error_frame", "response"]

ERROR_CODES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "invalid_api_key",
    "permission": "permission_denied",
    "not_found": "not_found",
    "request_too_large": "invalid_request_error",
    "rate_limit": "rate_limit_exceeded",
    "timeout": "timeout",
    "overloaded": "server_is_overloaded",
    "server": "server_error",
}
"""The ``code`` of each kind of error (OpenAI's names)."""


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def usage_body(ending: Ending) -> dict[str, Any] | None:
    """The Responses ``usage`` object of a turn; ``None`` for a turn whose backend
    counted nothing (llama.cpp's ``/completion`` route, as cuca reads it): no count is
    made up."""
    usage, cache = ending.usage, ending.prompt_cache_usage
    if usage is None and cache is None:
        return None
    prompt = usage.prompt_tokens if usage is not None else 0
    output = usage.completion_tokens if usage is not None else 0
    reasoning = usage.reasoning_tokens if usage is not None else None
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": cache.read_tokens if cache else 0,
            "cache_write_tokens": cache.write_tokens if cache else 0,
        },
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning or 0},
        "total_tokens": prompt + output,
    }


class _Item:
    """The output item being written."""

    __slots__ = ("body", "ident", "index", "issuer", "signature", "text")

    def __init__(self, index: int, body: dict[str, Any]) -> None:
        self.index = index
        self.body = body
        self.text: list[str] = []
        self.signature: str | None = None
        self.issuer: ProviderEndpoint | None = None
        self.ident: str | None = None


class ResponseStream:
    """Writes one served turn as ``/responses`` events.

    Call :meth:`open` once, :meth:`write` for each item, then :meth:`close` with how the
    turn ended, or :meth:`fail` with the error that ended it; each returns the bytes to
    send. ``output`` holds the finished output items (the response object's
    ``output``).
    """

    def __init__(
        self,
        model: str,
        *,
        response_id: str | None = None,
        created_at: int | None = None,
        signatures: Signatures = PASS_THROUGH,
    ) -> None:
        self.model = model
        self.id = response_id or _new_id("resp")
        self.created_at = int(time.time()) if created_at is None else created_at
        self.signatures = signatures
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.item: _Item | None = None
        self.called = False
        self.done = False
        self.status = "in_progress"

    def snapshot(self, status: str, ending: Ending | None = None) -> dict[str, Any]:
        """The ``response`` object as it stands."""
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": list(self.output),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": None if ending is None else usage_body(ending),
        }
        if status == "incomplete":
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        return body

    def _event(self, kind: str, **fields: Any) -> bytes:
        frame = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse(frame, kind)

    def open(self, input_tokens: int | None = None) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        created = self._event("response.created", response=self.snapshot("in_progress"))
        return created + self._event("response.in_progress", response=self.snapshot("in_progress"))

    def write(self, item: Item) -> bytes:
        """The events of one item."""
        if self.done:
            return b""
        if isinstance(item, Text):
            return self._text(item.text) if item.text else b""
        if isinstance(item, Thinking):
            return self._thinking(item)
        if isinstance(item, ToolCall):
            return self._call(item.id, item.name, item.arguments_json())
        if isinstance(item, ToolCallError):
            return self._call(item.tool_call_id or _new_id("call"), item.name or "", item.raw)
        return b""

    def close(self, ending: Ending) -> bytes:
        """The open item's end and ``response.completed`` (or ``.incomplete``)."""
        if self.done:
            return b""
        out = self._end_item()
        self.done = True
        finish = finish_kind(ending.finish_reason, self.called)
        self.status = "incomplete" if finish == "length" else "completed"
        kind = f"response.{self.status}"
        return out + self._event(kind, response=self.snapshot(self.status, ending))

    def fail(self, error: BaseException) -> bytes:
        """The ``error`` event for the error that ended the turn."""
        if self.done:
            return b""
        self.done = True
        return self._event("error", **error_frame(error))

    # -- items -------------------------------------------------------------------------

    def _start(self, body: dict[str, Any]) -> bytes:
        self.item = _Item(len(self.output), body)
        return self._event("response.output_item.added", output_index=self.item.index, item=body)

    def _where(self) -> dict[str, Any]:
        assert self.item is not None
        return {"item_id": self.item.body["id"], "output_index": self.item.index}

    def _end_item(self) -> bytes:
        item = self.item
        if item is None:
            return b""
        self.item = None
        body, text, out = item.body, "".join(item.text), b""
        where = {"item_id": body["id"], "output_index": item.index}
        if body["type"] == "reasoning":
            part: dict[str, Any] = {"type": "reasoning_text", "text": text}
            out += self._event("response.reasoning_text.done", **where, content_index=0, text=text)
            sealed = self.signatures.seal(text, item.signature, item.issuer, item.ident)
            body = {**body, "content": [part], "encrypted_content": sealed or None}
        elif body["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": []}
            out += self._event("response.output_text.done", **where, content_index=0, text=text)
            out += self._event("response.content_part.done", **where, content_index=0, part=part)
            body = {**body, "status": "completed", "content": [part]}
        else:
            body = {**body, "status": "completed"}
        self.output.append(body)
        return out + self._event("response.output_item.done", output_index=item.index, item=body)

    def _text(self, text: str) -> bytes:
        out = b""
        if self.item is None or self.item.body["type"] != "message":
            out += self._end_item()
            body = {
                "id": _new_id("msg"),
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            out += self._start(body)
            part = {"type": "output_text", "text": "", "annotations": []}
            out += self._event(
                "response.content_part.added", **self._where(), content_index=0, part=part
            )
        assert self.item is not None
        self.item.text.append(text)
        delta = {"content_index": 0, "delta": text, "logprobs": []}
        return out + self._event("response.output_text.delta", **self._where(), **delta)

    def _thinking(self, block: Thinking) -> bytes:
        if block.redacted or (not block.text and block.signature is None and block.id is None):
            return b""
        out = b""
        if self.item is None or self.item.body["type"] != "reasoning":
            out += self._end_item()
            body = {"id": block.id or _new_id("rs"), "type": "reasoning", "summary": []}
            out += self._start(body)
        item = self.item
        assert item is not None
        # the item keeps the id it was announced with (a client checks that the item
        # done is the item added); an id that arrives later travels in the seal
        if block.text:
            item.text.append(block.text)
            delta = {"content_index": 0, "delta": block.text}
            out += self._event("response.reasoning_text.delta", **self._where(), **delta)
        if block.signature is not None or block.id is not None:  # the item's last block
            item.signature = block.signature
            item.issuer = block.provider
            item.ident = block.id
            out += self._end_item()
        return out

    def _call(self, call_id: str, name: str, arguments: str) -> bytes:
        self.called = True
        out = self._end_item()
        body = {
            "id": _new_id("fc"),
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": name,
            "arguments": "",
        }
        out += self._start(body)
        where = self._where()
        out += self._event("response.function_call_arguments.delta", **where, delta=arguments)
        done = {"arguments": arguments, "name": name}
        out += self._event("response.function_call_arguments.done", **where, **done)
        assert self.item is not None
        self.item.body = {**body, "arguments": arguments}
        return out + self._end_item()


def error_frame(error: BaseException, status: int | None = None) -> dict[str, Any]:
    """``{"code", "message", "param"}`` of an ``error`` event for ``error``."""
    _, kind = error_kind(error, status)
    message = error.message if isinstance(error, CucaError) else str(error)
    return {"code": ERROR_CODES[kind], "message": message, "param": None}


def error_body(error: BaseException, status: int | None = None) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of an error answered before any byte of a turn (the
    OpenAI envelope: ``{"error": {"message", "type", "param", "code"}}``)."""
    status, kind = error_kind(error, status)
    frame = error_frame(error, status)
    return status, {"error": {**frame, "type": ERROR_CODES[kind]}}


def response(
    items: Iterable[Item],
    ending: Ending,
    model: str,
    *,
    response_id: str | None = None,
    created_at: int | None = None,
    signatures: Signatures = PASS_THROUGH,
) -> dict[str, Any]:
    """One ``response`` object for a whole turn: the output items the stream would have
    written, its status and usage."""
    writer = ResponseStream(
        model, response_id=response_id, created_at=created_at, signatures=signatures
    )
    for item in items:
        writer.write(item)
    writer.close(ending)
    return writer.snapshot(writer.status, ending)
