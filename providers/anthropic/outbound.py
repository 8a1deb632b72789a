"""A served turn as the Messages wire writes it: the event stream
(:class:`MessageStream`) or one ``message`` object (:func:`message`).

The events, in the order Anthropic sends them (``reference/wire.md`` section 8), with
what seed 004 asks of a server that answers on this wire:

- ``message_start`` carries ``usage.input_tokens`` (the prompt less its cache reads and
  writes, which ride beside it), then one ``ping``.
- Each block is ``content_block_start``, its deltas, ``content_block_stop``, at
  contiguous indices from 0. One block is open at a time: a thinking block is closed
  before the text or the tool call after it, and thinking after a call is a new block
  (think, call, think stays three blocks). A Text item with no text opens nothing, so
  there is never an empty text block.
- A thinking block's signature goes out as a ``signature_delta`` just before its stop,
  sealed by the server's :class:`~cuca.providers.serving.Signatures` (the backend's own
  signature, or one the server issues for a backend that signs nothing). A Thinking
  item that carries a signature ends its block, as the client decoders emit it.
- A tool call is a ``tool_use`` block: ``input`` is ``{}`` at the start and the
  arguments come as one ``input_json_delta``.
- ``message_delta`` carries the stop reason (``tool_use`` only when a call was
  written, ``max_tokens`` for a cut) and the final usage: output tokens with the
  reasoning share in ``output_tokens_details.thinking_tokens``, and the input counts
  again (they are exact only once the turn has run; a delta's counts replace the
  start's, as the ``anthropic`` package's accumulator reads them).
- ``message_stop`` ends the stream.
- An error is ``event: error`` with ``{"type": "error", "error": {"type", "message"}}``.
  The wire has no place for a tool call whose arguments are not an object: such a
  call (a :class:`~cuca.errors.ToolCallError` item) ends the stream with an
  ``api_error`` that names it, so it is reported, never dropped.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

from cuca.errors import CucaError, ToolCallError
from cuca.types import ProviderEndpoint, Text, Thinking, ToolCall

from ..serving import (
    PASS_THROUGH,
    Ending,
    ErrorKind,
    Finish,
    Item,
    Signatures,
    error_kind,
    finish_kind,
    sse,
)

__all__ = [
    "ERROR_TYPES",
    "STOP_REASONS",
    "MessageStream",
    "count_tokens_body",
    "error_body",
    "error_frame",
    "message",
    "models_body",
    "new_message_id",
]

STOP_REASONS: dict[Finish, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}

ERROR_TYPES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "request_too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "timeout": "timeout_error",
    "overloaded": "overloaded_error",
    "server": "api_error",
}
"""The ``error.type`` of each kind of error (Anthropic's errors page)."""


def new_message_id() -> str:
    """A fresh ``msg_`` id."""
    return "msg_" + secrets.token_hex(12)


def _input_usage(ending: Ending | None) -> dict[str, int]:
    """``input_tokens`` (the prompt less its cache reads and writes) and the two cache
    counts, as Anthropic splits them."""
    usage = ending.usage if ending is not None else None
    cache = ending.prompt_cache_usage if ending is not None else None
    read = cache.read_tokens if cache is not None else 0
    write = cache.write_tokens if cache is not None else 0
    prompt = usage.prompt_tokens if usage is not None else read + write
    return {
        "input_tokens": max(prompt - read - write, 0),
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
    }


def _final_usage(ending: Ending) -> dict[str, Any]:
    usage = ending.usage
    body: dict[str, Any] = {
        **_input_usage(ending),
        "output_tokens": usage.completion_tokens if usage is not None else 0,
    }
    if usage is not None and usage.reasoning_tokens is not None:
        body["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    return body


class _Block:
    """The block being written: its index, type and what its end needs."""

    __slots__ = ("ident", "index", "issuer", "kind", "signature", "text")

    def __init__(self, index: int, kind: str) -> None:
        self.index = index
        self.kind = kind
        self.text: list[str] = []
        self.signature: str | None = None
        self.issuer: ProviderEndpoint | None = None
        self.ident: str | None = None


class MessageStream:
    """Writes one served turn as Messages events.

    Call :meth:`open` once (with the prompt's tokens when known), :meth:`write` for each
    item, then :meth:`close` with how the turn ended, or :meth:`fail` with the error
    that ended it; each returns the bytes to send. ``signatures`` seals each thinking
    block's signature (by default the backend's, as it came). ``failed`` is set when
    an item could not be written and ended the stream (see the module docstring).
    """

    def __init__(
        self,
        model: str,
        *,
        message_id: str | None = None,
        signatures: Signatures = PASS_THROUGH,
    ) -> None:
        self.model = model
        self.id = message_id or new_message_id()
        self.signatures = signatures
        self.next_index = 0
        self.block: _Block | None = None
        self.called = False
        self.done = False
        self.failed = False

    def open(self, input_tokens: int | None = None) -> bytes:
        """``message_start`` (its usage: ``input_tokens``, 0 when not known yet) and a
        ``ping``."""
        usage = {
            "input_tokens": input_tokens or 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        }
        start: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return sse({"type": "message_start", "message": start}, "message_start") + sse(
            {"type": "ping"}, "ping"
        )

    def write(self, item: Item) -> bytes:
        """The events of one item."""
        if self.done:
            return b""
        if isinstance(item, Text):
            if not item.text:
                return b""
            out = self._ensure("text")
            return out + self._delta({"type": "text_delta", "text": item.text})
        if isinstance(item, Thinking):
            return self._thinking(item)
        if isinstance(item, ToolCall):
            return self._tool_use(item)
        if isinstance(item, ToolCallError):
            self.failed = True
            return self._end_block() + self.fail(item)
        return b""

    def close(self, ending: Ending) -> bytes:
        """The open block's end, ``message_delta`` (stop reason, usage) and
        ``message_stop``."""
        if self.done:
            return b""
        out = self._end_block()
        self.done = True
        reason = STOP_REASONS[finish_kind(ending.finish_reason, self.called)]
        delta = {"stop_reason": reason, "stop_sequence": None}
        tail = {"type": "message_delta", "delta": delta, "usage": _final_usage(ending)}
        out += sse(tail, "message_delta")
        return out + sse({"type": "message_stop"}, "message_stop")

    def fail(self, error: BaseException) -> bytes:
        """The ``error`` event for the error that ended the turn."""
        if self.done:
            return b""
        self.done = True
        return sse(error_frame(error), "error")

    # -- blocks ------------------------------------------------------------------------

    def _start(self, kind: str, content: dict[str, Any]) -> bytes:
        self.block = _Block(self.next_index, kind)
        self.next_index += 1
        start = {"type": "content_block_start", "index": self.block.index, "content_block": content}
        return sse(start, "content_block_start")

    def _ensure(self, kind: str) -> bytes:
        """Open a block of ``kind`` unless one is open (closing another kind first)."""
        if self.block is not None and self.block.kind == kind:
            return b""
        out = self._end_block()
        if kind == "text":
            return out + self._start("text", {"type": "text", "text": ""})
        return out + self._start("thinking", {"type": "thinking", "thinking": "", "signature": ""})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        assert self.block is not None
        frame = {"type": "content_block_delta", "index": self.block.index, "delta": delta}
        return sse(frame, "content_block_delta")

    def _end_block(self) -> bytes:
        block, out = self.block, b""
        if block is None:
            return out
        if block.kind == "thinking":
            text = "".join(block.text)
            sealed = self.signatures.seal(text, block.signature, block.issuer, block.ident)
            if sealed:
                out += self._delta({"type": "signature_delta", "signature": sealed})
        self.block = None
        return out + sse({"type": "content_block_stop", "index": block.index}, "content_block_stop")

    def _thinking(self, item: Thinking) -> bytes:
        if item.redacted:
            out = self._end_block()
            data = self.signatures.seal("", item.signature, item.provider, item.id)
            out += self._start("redacted_thinking", {"type": "redacted_thinking", "data": data})
            return out + self._end_block()
        if not item.text and item.signature is None:
            return b""
        out = self._ensure("thinking")
        assert self.block is not None
        if item.text:
            self.block.text.append(item.text)
            out += self._delta({"type": "thinking_delta", "thinking": item.text})
        if item.signature is not None:  # the block's last item: it ends here
            self.block.signature = item.signature
            self.block.issuer = item.provider
            self.block.ident = item.id
            out += self._end_block()
        return out

    def _tool_use(self, call: ToolCall) -> bytes:
        self.called = True
        out = self._end_block()
        content = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        out += self._start("tool_use", content)
        out += self._delta({"type": "input_json_delta", "partial_json": call.arguments_json()})
        return out + self._end_block()


def error_frame(error: BaseException, status: int | None = None) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` for ``error``."""
    _, kind = error_kind(error, status)
    text = error.message if isinstance(error, CucaError) else str(error)
    if isinstance(error, ToolCallError):
        text = f"malformed tool call {error.name or ''}({error.raw}): {text}"
    return {"type": "error", "error": {"type": ERROR_TYPES[kind], "message": text}}


def error_body(error: BaseException, status: int | None = None) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of an error answered before any byte of a turn."""
    return error_kind(error, status)[0], error_frame(error, status)


def message(
    items: Iterable[Item],
    ending: Ending,
    model: str,
    *,
    message_id: str | None = None,
    signatures: Signatures = PASS_THROUGH,
) -> dict[str, Any]:
    """One ``message`` object for a whole turn: the blocks the stream would have
    written, in the same order and with the same signatures (it is the stream's
    events, accumulated). A :class:`~cuca.errors.ToolCallError` item is raised: the
    server answers it as an error."""
    writer = MessageStream(model, message_id=message_id, signatures=signatures)
    events: list[bytes] = [writer.open()]
    for item in items:
        events.append(writer.write(item))
        if isinstance(item, ToolCallError):  # no place for it in a message: an error
            raise item
    events.append(writer.close(ending))
    return _accumulate(b"".join(events), writer.id, model)


def _accumulate(stream: bytes, message_id: str, model: str) -> dict[str, Any]:
    """The ``message`` the events in ``stream`` (as this module writes them) build."""
    content: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    for frame in stream.split(b"\n\n"):
        if not frame:
            continue
        data = json.loads(frame.split(b"data: ", 1)[1])
        kind = data["type"]
        if kind == "message_start":
            result = data["message"]
        elif kind == "content_block_start":
            content.append(dict(data["content_block"]))
        elif kind == "content_block_delta":
            _apply(content[data["index"]], data["delta"])
        elif kind == "message_delta":
            result.update(data["delta"])
            result["usage"] = data["usage"]
    for block in content:
        if block["type"] == "tool_use":
            block["input"] = json.loads(block.pop("_json", "") or "{}")
    return {**result, "id": message_id, "model": model, "content": content}


def _apply(block: dict[str, Any], delta: dict[str, Any]) -> None:
    kind = delta["type"]
    if kind == "text_delta":
        block["text"] += delta["text"]
    elif kind == "thinking_delta":
        block["thinking"] += delta["thinking"]
    elif kind == "signature_delta":
        block["signature"] = delta["signature"]
    elif kind == "input_json_delta":
        block["_json"] = block.get("_json", "") + delta["partial_json"]


def count_tokens_body(input_tokens: int) -> dict[str, Any]:
    """The answer of ``/v1/messages/count_tokens``."""
    return {"input_tokens": input_tokens}


def models_body(models: Sequence[str], created_at: str = "1970-01-01T00:00:00Z") -> dict[str, Any]:
    """``GET /v1/models`` as the Models API lists them."""
    data = [{"type": "model", "id": m, "display_name": m, "created_at": created_at} for m in models]
    first = models[0] if models else None
    last = models[-1] if models else None
    return {"data": data, "has_more": False, "first_id": first, "last_id": last}
