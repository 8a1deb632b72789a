"""The ``/responses`` event-stream decoder (OpenAI's Responses API, as served by OpenAI,
vLLM, LM Studio and llama.cpp). The request side is :mod:`.encode`.

Every frame is a JSON object whose ``type`` names the event (field names from the
``openai`` package's ``types/responses/``):

- ``response.output_text.delta`` is answer text; ``response.reasoning_summary_text.delta``
  (OpenAI) and ``response.reasoning_text.delta`` (vLLM, LM Studio) are reasoning.
- ``response.output_item.added`` opens an item: a ``function_call`` brings its ``call_id``
  and ``name``, later ``response.function_call_arguments.delta`` / ``.done`` events name
  it by ``item_id`` only. Several calls may be open at once, their deltas interleaved.
- ``response.output_item.done`` closes an item: a ``reasoning`` item carries its final
  ``encrypted_content``, yielded as ``Thinking("", signature=..., id=...)`` after its
  text; a call not yet yielded (a server that sent no ``.done`` event) is yielded then.
- ``response.completed`` and ``response.incomplete`` end the turn with usage (the
  latter's finish reason comes from ``incomplete_details.reason``);
  ``response.failed`` and ``error`` end it with the error their ``code`` names
  (:func:`.decoding.stream_error`: ``server_error`` a ``ServerError``...). Other events
  (``response.created``, ``response.content_part.added``...) are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import msgspec

from cuca.errors import StreamIncomplete
from cuca.stages.sse import SseEvent
from cuca.types import (
    FinishReason,
    PromptCacheUsage,
    ProviderEndpoint,
    Text,
    Thinking,
    TokenUsage,
    TurnSummary,
)

from ..base import Item, StreamDecoder, guarded_feed
from ..chat.overflow import chat_overflow
from ..controls import finish_fields
from ..decoding import Shape, decode_frame, error_text, finished_call, stream_error

__all__ = ["INCOMPLETE_REASONS", "ResponsesDecoder", "read_usage"]

INCOMPLETE_REASONS: Mapping[str, FinishReason] = {
    "max_output_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}
"""``incomplete_details.reason`` values as finish reasons (any other is ``OTHER``); a
``completed`` response is ``STOP``, or ``TOOL_CALLS`` when it called a function."""
_RESPONSES_FINISH: Mapping[str, FinishReason] = {
    "completed": FinishReason.STOP,
    **INCOMPLETE_REASONS,
}


# -- the event's shape (field names from the openai package's types/responses/) -------


class _OutputItem(Shape):
    """An item of ``response.output_item.added`` / ``.done``: a ``function_call``, a
    ``reasoning`` item or a ``message``."""

    type: str | None = None
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: Any = None  # read by hand: arguments that are not text are shown, not lost
    encrypted_content: str | None = None


class _TokenDetails(Shape):
    cached_tokens: int | None = None  # input_tokens_details
    cache_write_tokens: int | None = None  # input_tokens_details
    reasoning_tokens: int | None = None  # output_tokens_details


class _Usage(Shape):
    input_tokens: int | None = None
    output_tokens: int | None = None
    input_tokens_details: _TokenDetails | None = None
    output_tokens_details: _TokenDetails | None = None


class _Incomplete(Shape):
    reason: str | None = None


class _Response(Shape):
    usage: _Usage | None = None
    incomplete_details: _Incomplete | None = None
    error: Any = None


class _Event(Shape):
    """One stream event; ``type`` says which of the other fields it uses."""

    type: str | None = None
    delta: str | None = None
    item: _OutputItem | None = None
    item_id: str | None = None
    name: str | None = None
    arguments: Any = None  # read by hand: arguments that are not text are shown, not lost
    response: _Response | None = None


_EVENT = msgspec.json.Decoder(_Event)
_NO_DETAILS = _TokenDetails()


def read_usage(usage: _Usage | None) -> tuple[TokenUsage | None, PromptCacheUsage | None]:
    """Token and cache usage from a Responses ``usage`` object (``input_tokens``,
    ``input_tokens_details.cached_tokens``, ``output_tokens``,
    ``output_tokens_details.reasoning_tokens``)."""
    if usage is None:
        return None, None
    output = usage.output_tokens_details or _NO_DETAILS
    tokens = TokenUsage(usage.input_tokens or 0, usage.output_tokens or 0, output.reasoning_tokens)
    details = usage.input_tokens_details or _NO_DETAILS
    read, write = details.cached_tokens, details.cache_write_tokens
    cache = None if read is None and write is None else PromptCacheUsage(read or 0, write or 0)
    return tokens, cache


class _OpenCall:
    __slots__ = ("args", "call_id", "done", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.call_id = call_id
        self.name = name
        self.args: list[str] = []
        self.done = False


_Handler = Callable[["ResponsesDecoder", _Event], list[Item]]


class ResponsesDecoder(StreamDecoder):
    """Turns ``/responses`` stream events into blocks (one instance per turn).

    A function call is yielded once its arguments are final, as a ToolCall whose ``id``
    is the item's ``call_id``; arguments that are not a JSON object are yielded as a
    ``ToolCallError`` ("malformed tool call", with the call's id and name) and the stream
    goes on.
    """

    def __init__(self, endpoint: ProviderEndpoint) -> None:
        self.endpoint = endpoint
        self.provider = str(endpoint)
        self.finished = False
        self._calls: dict[str, _OpenCall] = {}
        self._usage: TokenUsage | None = None
        self._cache: PromptCacheUsage | None = None
        self._finish_reason: str | None = None
        self._called = False
        self._data = ""

    @guarded_feed("responses")
    def feed(self, event: SseEvent) -> list[Item]:
        if not event.data or self.finished:
            return []
        frame = decode_frame(_EVENT, event.data, self.provider)
        if frame.type == "error":  # its fields vary: read from the whole frame
            whole = json.loads(event.data)
            error = (whole.get("error") or whole) if isinstance(whole, dict) else None
            message = _error_event_text(whole)
            raise stream_error(self.provider, message, error, event.data, chat_overflow)
        handler = self._handlers.get(str(frame.type))
        if handler is None:
            return []
        self._data = event.data  # the frame as sent, for an error's body
        return handler(self, frame)

    def close(self) -> list[Item]:
        if self.finished:
            return []
        raise StreamIncomplete("stream ended before the turn was complete")

    def summary(self) -> TurnSummary:
        finish = finish_fields(self._finish_reason, _RESPONSES_FINISH, called=self._called)
        return TurnSummary(self._usage, self._cache, **finish)

    # -- events ------------------------------------------------------------------------

    def _text(self, frame: _Event) -> list[Item]:
        return [Text(frame.delta)] if frame.delta else []

    def _reasoning(self, frame: _Event) -> list[Item]:
        return [Thinking(frame.delta, provider=self.endpoint)] if frame.delta else []

    def _item_added(self, frame: _Event) -> list[Item]:
        if frame.item is not None and frame.item.type == "function_call":
            self._open_call(frame.item)
        return []

    def _open_call(self, item: _OutputItem) -> _OpenCall:
        key = item.id or item.call_id or str(len(self._calls))
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = _OpenCall(item.call_id or key, "")
        call.name = call.name or item.name or ""
        return call

    def _args_delta(self, frame: _Event) -> list[Item]:
        call = self._calls.get(str(frame.item_id))
        if call is not None and frame.delta is not None:
            call.args.append(frame.delta)
        return []

    def _args_done(self, frame: _Event) -> list[Item]:
        call = self._calls.get(str(frame.item_id))
        if call is None:
            return []
        if frame.name is not None and not call.name:
            call.name = frame.name
        if frame.arguments is not None:
            call.args = [_arguments_text(frame.arguments)]
        return self._emit(call)

    def _item_done(self, frame: _Event) -> list[Item]:
        item = frame.item
        if item is None:
            return []
        if item.type == "function_call":
            call = self._open_call(item)
            if item.arguments is not None and not call.done:
                call.args = [_arguments_text(item.arguments)]
            return self._emit(call)
        if item.type == "reasoning":
            signature = item.encrypted_content or None
            if signature is None and item.id is None:
                return []
            return [Thinking("", signature=signature, provider=self.endpoint, id=item.id)]
        return []

    def _completed(self, frame: _Event) -> list[Item]:
        response = frame.response or _NO_RESPONSE
        self._usage, self._cache = read_usage(response.usage)
        self.finished = True
        pending = self._pending()
        self._finish_reason = "completed"
        return pending

    def _incomplete(self, frame: _Event) -> list[Item]:
        response = frame.response or _NO_RESPONSE
        self._usage, self._cache = read_usage(response.usage)
        self.finished = True
        details = response.incomplete_details or _Incomplete()
        reason = details.reason or "incomplete"
        self._finish_reason = reason
        return self._pending()

    def _failed(self, frame: _Event) -> list[Item]:
        error = (frame.response or _NO_RESPONSE).error
        message = _described(error) if error else "response failed"
        raise stream_error(self.provider, message, error, self._data, chat_overflow)

    _handlers: ClassVar[Mapping[str, _Handler]] = {
        "response.output_text.delta": _text,
        "response.reasoning_summary_text.delta": _reasoning,
        "response.reasoning_text.delta": _reasoning,
        "response.output_item.added": _item_added,
        "response.function_call_arguments.delta": _args_delta,
        "response.function_call_arguments.done": _args_done,
        "response.output_item.done": _item_done,
        "response.completed": _completed,
        "response.incomplete": _incomplete,
        "response.failed": _failed,
    }

    # -- calls -------------------------------------------------------------------------

    def _pending(self) -> list[Item]:
        """Calls still open when the turn ends: yielded as they stand."""
        return [item for call in self._calls.values() if not call.done for item in self._emit(call)]

    def _emit(self, call: _OpenCall) -> list[Item]:
        if call.done:
            return []
        call.done = True
        self._called = True
        raw = "".join(call.args).strip()
        return [finished_call(self.provider, call.call_id, call.name, raw)]


_NO_RESPONSE = _Response()


def _arguments_text(arguments: Any) -> str:
    """Arguments as their JSON text: an object a server sent parsed is read as one, any
    other value that is not text is kept as its JSON, to be shown in a ``ToolCallError``."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _error_event_text(frame: Any) -> str:
    """An ``error`` event's text: its ``error`` object, or its own ``code`` and
    ``message`` (OpenAI puts them at the top of the event)."""
    error = frame.get("error") if isinstance(frame, dict) else None
    return _described(error or frame)


def _described(error: Any) -> str:
    """``code: message`` for a Responses error object (``{"code", "message"}``)."""
    if isinstance(error, dict) and "message" in error:
        code = error.get("code")
        return f"{code}: {error_text(error)}" if code else error_text(error)
    return error_text(error)
