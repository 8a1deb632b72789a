"""The ``/responses`` event-stream decoder (OpenAI's Responses API, as served by OpenAI,
vLLM, LM Studio and llama.cpp). The request side is :mod:`.openai_responses`.

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
  ``response.failed`` and ``error`` end it with a ``ProviderError``. Other events
  (``response.created``, ``response.content_part.added``...) are ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

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
)

from .base import Item, StreamDecoder, guarded_feed, loads_json
from .decoding import read_int as _int
from .decoding import tool_arguments
from .openai_decode import _dict, error_text

__all__ = ["INCOMPLETE_REASONS", "ResponsesDecoder", "read_usage"]

INCOMPLETE_REASONS: Mapping[str, str] = {"max_output_tokens": "length"}
"""``incomplete_details.reason`` values renamed to the unified finish reason."""


def read_usage(usage: Any) -> tuple[TokenUsage | None, PromptCacheUsage | None]:
    """Token and cache usage from a Responses ``usage`` object (``input_tokens``,
    ``input_tokens_details.cached_tokens``, ``output_tokens``,
    ``output_tokens_details.reasoning_tokens``)."""
    if not isinstance(usage, dict):
        return None, None
    reasoning = _int(_dict(usage.get("output_tokens_details")).get("reasoning_tokens"))
    tokens = TokenUsage(
        _int(usage.get("input_tokens")) or 0, _int(usage.get("output_tokens")) or 0, reasoning
    )
    details = _dict(usage.get("input_tokens_details"))
    read, write = _int(details.get("cached_tokens")), _int(details.get("cache_write_tokens"))
    cache = None if read is None and write is None else PromptCacheUsage(read or 0, write or 0)
    return tokens, cache


class _OpenCall:
    __slots__ = ("args", "call_id", "done", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.call_id = call_id
        self.name = name
        self.args: list[str] = []
        self.done = False


_Handler = Callable[["ResponsesDecoder", dict[str, Any]], list[Item]]


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

    @guarded_feed("responses")
    def feed(self, event: SseEvent) -> list[Item]:
        if not event.data or self.finished:
            return []
        frame = loads_json(event.data, self.provider)
        if not isinstance(frame, dict):
            raise ProviderError(self.provider, f"unexpected frame: {event.data[:200]}")
        handler = self._handlers.get(str(frame.get("type")))
        return [] if handler is None else handler(self, frame)

    def close(self) -> list[Item]:
        if self.finished:
            return []
        raise StreamIncomplete("stream ended before the turn was complete")

    def summary(self) -> TurnSummary:
        return TurnSummary(self._usage, self._cache, self._finish_reason)

    # -- events ------------------------------------------------------------------------

    def _text(self, frame: dict[str, Any]) -> list[Item]:
        delta = frame.get("delta")
        return [Text(delta)] if isinstance(delta, str) and delta else []

    def _reasoning(self, frame: dict[str, Any]) -> list[Item]:
        delta = frame.get("delta")
        if isinstance(delta, str) and delta:
            return [Thinking(delta, provider=self.endpoint)]
        return []

    def _item_added(self, frame: dict[str, Any]) -> list[Item]:
        item = _dict(frame.get("item"))
        if item.get("type") == "function_call":
            self._open_call(item)
        return []

    def _open_call(self, item: Mapping[str, Any]) -> _OpenCall:
        key = str(item.get("id") or item.get("call_id") or len(self._calls))
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = _OpenCall(str(item.get("call_id") or key), "")
        call.name = call.name or str(item.get("name") or "")
        return call

    def _args_delta(self, frame: dict[str, Any]) -> list[Item]:
        call = self._calls.get(str(frame.get("item_id")))
        delta = frame.get("delta")
        if call is not None and isinstance(delta, str):
            call.args.append(delta)
        return []

    def _args_done(self, frame: dict[str, Any]) -> list[Item]:
        call = self._calls.get(str(frame.get("item_id")))
        if call is None:
            return []
        if isinstance(frame.get("name"), str) and not call.name:
            call.name = frame["name"]
        if isinstance(frame.get("arguments"), str):
            call.args = [frame["arguments"]]
        return self._emit(call)

    def _item_done(self, frame: dict[str, Any]) -> list[Item]:
        item = _dict(frame.get("item"))
        kind = item.get("type")
        if kind == "function_call":
            call = self._open_call(item)
            if isinstance(item.get("arguments"), str) and not call.done:
                call.args = [item["arguments"]]
            return self._emit(call)
        if kind == "reasoning":
            signature = item.get("encrypted_content")
            item_id = item.get("id")
            if not isinstance(signature, str) or not signature:
                signature = None
            if signature is None and not isinstance(item_id, str):
                return []
            item_id = item_id if isinstance(item_id, str) else None
            return [Thinking("", signature=signature, provider=self.endpoint, id=item_id)]
        return []

    def _completed(self, frame: dict[str, Any]) -> list[Item]:
        response = _dict(frame.get("response"))
        self._usage, self._cache = read_usage(response.get("usage"))
        self.finished = True
        pending = self._pending()
        self._finish_reason = "tool_calls" if self._called else "stop"
        return pending

    def _incomplete(self, frame: dict[str, Any]) -> list[Item]:
        response = _dict(frame.get("response"))
        self._usage, self._cache = read_usage(response.get("usage"))
        self.finished = True
        reason = str(_dict(response.get("incomplete_details")).get("reason") or "incomplete")
        self._finish_reason = INCOMPLETE_REASONS.get(reason, reason)
        return self._pending()

    def _failed(self, frame: dict[str, Any]) -> list[Item]:
        response = _dict(frame.get("response"))
        error = response.get("error")
        raise ProviderError(self.provider, _described(error) if error else "response failed")

    def _error(self, frame: dict[str, Any]) -> list[Item]:
        raise ProviderError(self.provider, _described(frame.get("error") or frame))

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
        "error": _error,
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
        if not call.name:
            message = f"malformed tool call: no function name: {raw}"
            return [ToolCallError(self.provider, message, tool_call_id=call.call_id, raw=raw)]
        arguments = tool_arguments(raw)
        if arguments is None:
            message = f"malformed tool call: {raw}"
            return [
                ToolCallError(
                    self.provider, message, tool_call_id=call.call_id, name=call.name, raw=raw
                )
            ]
        return [ToolCall(call.call_id, call.name, arguments)]


def _described(error: Any) -> str:
    """``code: message`` for a Responses error object (``{"code", "message"}``)."""
    if isinstance(error, dict) and "message" in error:
        code = error.get("code")
        return f"{code}: {error_text(error)}" if code else error_text(error)
    return error_text(error)
