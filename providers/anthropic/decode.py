"""The Anthropic Messages event stream, decoded into blocks (also DeepSeek's bridge).

Events, in the order the API sends them::

    message_start            usage: input, cache read, cache write
    content_block_start      index, block type (text, thinking, redacted_thinking, tool_use)
    content_block_delta*     text_delta | thinking_delta | signature_delta | input_json_delta
    content_block_stop
    ...more blocks...
    message_delta            stop_reason, cumulative usage (overwrites earlier values)
    message_stop             the end marker
    ping                     anywhere; ignored
    error                    anywhere; ends the turn

Text and thinking text are yielded as they arrive. A thinking block's signature comes
last, so it is yielded at ``content_block_stop`` as ``Thinking("", signature=...)``:
the last item of that block. A collector that joins a block's Thinking items (and
starts a new block after a signed one) gets back exactly the block the API sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs
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
)

from ..base import Item, StreamDecoder, guarded_feed
from ..controls import finish_fields
from ..decoding import Shape, decode_frame, stream_error, streamed_arguments
from .overflow import anthropic_overflow

__all__ = ["AnthropicDecoder"]

USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


# -- the events' shape (wire.md section 8) ---------------------------------------------


class _ContentBlock(Shape):
    """``content_block_start.content_block``: text, thinking, redacted_thinking, tool_use."""

    type: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None  # read by hand: an input that is not an object is shown, not lost
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None  # redacted_thinking


class _Delta(Shape):
    """``content_block_delta.delta`` (text, thinking, signature or input JSON), or
    ``message_delta.delta`` (the stop reason)."""

    type: str | None = None
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    partial_json: Any = None  # read by hand, as ``input``: a call is never lost
    stop_reason: str | None = None


class _OutputDetails(Shape):
    thinking_tokens: int | None = None


class _Usage(Shape):
    """Running totals: a count that is present replaces the earlier one."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    output_tokens_details: _OutputDetails | None = None


class _Message(Shape):
    usage: _Usage | None = None


class _Event(Shape):
    """One event; ``type`` (or the SSE event name) says which other fields it uses."""

    type: str | None = None
    index: int | None = 0
    message: _Message | None = None  # message_start
    content_block: _ContentBlock | None = None  # content_block_start
    delta: _Delta | None = None  # content_block_delta, message_delta
    usage: _Usage | None = None  # message_delta


_EVENT = msgspec.json.Decoder(_Event)


@attrs.define
class _OpenBlock:
    """A content block between its start and stop events."""

    kind: str
    id: str = ""
    name: str = ""
    fragments: list[str] = attrs.Factory(list)
    initial_input: Any = None
    signature: str | None = None
    malformed: bool = False  # a fragment that was not text (kept as its JSON)


_Handler = Callable[["AnthropicDecoder", _Event], list[Item]]


ANTHROPIC_FINISH: Mapping[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.REFUSAL,
}
"""The Messages API's ``stop_reason`` values; any other (``pause_turn``...) is ``OTHER``."""


class AnthropicDecoder(StreamDecoder):
    """Decodes one response of the Messages API; ``provider`` names the backend in
    errors (``"anthropic"``, or ``"deepseek"`` for the bridge)."""

    def __init__(self, endpoint: ProviderEndpoint, provider: str) -> None:
        self.endpoint = endpoint
        self.provider = provider
        self.finished = False
        self._open: dict[int, _OpenBlock] = {}
        self._usage: dict[str, int] = {}
        self._reasoning_tokens: int | None = None
        self._stop_reason: str | None = None

    @guarded_feed("anthropic")
    def feed(self, event: SseEvent) -> list[Item]:
        if self.finished or event.event == "ping":
            return []
        if event.event == "error" and not event.data.lstrip().startswith("{"):
            raise ProviderError(self.provider, event.data[:500])
        payload = decode_frame(_EVENT, event.data, self.provider)
        kind = payload.type or event.event
        if kind == "error" or event.event == "error":
            frame = json.loads(event.data)
            error = frame.get("error") if isinstance(frame, dict) else None
            message = _error_text(frame)
            raise stream_error(self.provider, message, error, event.data, anthropic_overflow)
        handler = self._handlers.get(kind)
        return handler(self, payload) if handler is not None else []

    def close(self) -> list[Item]:
        if not self.finished:
            raise StreamIncomplete(f"{self.provider} stream ended before message_stop")
        return []

    def summary(self) -> TurnSummary:
        usage = self._usage
        finish = finish_fields(self._stop_reason, ANTHROPIC_FINISH)
        if not usage:
            return TurnSummary(**finish)
        read = usage.get("cache_read_input_tokens", 0)
        write = usage.get("cache_creation_input_tokens", 0)
        tokens = TokenUsage(
            prompt_tokens=usage.get("input_tokens", 0) + read + write,
            completion_tokens=usage.get("output_tokens", 0),
            reasoning_tokens=self._reasoning_tokens,
        )
        has_cache = "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage
        cache = PromptCacheUsage(read, write) if has_cache else None
        return TurnSummary(tokens, cache, **finish)

    # -- events ------------------------------------------------------------------------

    def _message_start(self, payload: _Event) -> list[Item]:
        if payload.message is not None:
            self._take_usage(payload.message.usage)
        return []

    def _block_start(self, payload: _Event) -> list[Item]:
        block = payload.content_block
        if block is None:
            return []
        opened = _OpenBlock(block.type or "", block.id or "", block.name or "")
        opened.initial_input = block.input
        opened.signature = block.signature or None
        self._open[payload.index or 0] = opened
        if block.type == "redacted_thinking":
            return [Thinking("", signature=block.data or "", provider=self.endpoint, redacted=True)]
        if block.type == "text":
            return self._text(block.text)
        if block.type == "thinking":
            return self._thinking(block.thinking)
        return []

    def _block_delta(self, payload: _Event) -> list[Item]:
        delta = payload.delta
        opened = self._open.get(payload.index or 0)
        if delta is None or opened is None:
            return []
        kind = delta.type
        if kind == "text_delta":
            return self._text(delta.text)
        if kind == "thinking_delta":
            return self._thinking(delta.thinking)
        if kind == "signature_delta":
            opened.signature = delta.signature or None
        elif kind == "input_json_delta":
            self._input_fragment(opened, delta.partial_json)
        return []

    def _block_stop(self, payload: _Event) -> list[Item]:
        opened = self._open.pop(payload.index or 0, None)
        if opened is None:
            return []
        if opened.kind == "thinking" and opened.signature:
            return [Thinking("", signature=opened.signature, provider=self.endpoint)]
        if opened.kind == "tool_use":
            return [self._tool_call(opened)]
        return []

    def _message_delta(self, payload: _Event) -> list[Item]:
        if payload.delta is not None and payload.delta.stop_reason:
            self._stop_reason = payload.delta.stop_reason
        self._take_usage(payload.usage)
        return []

    def _message_stop(self, payload: _Event) -> list[Item]:
        self.finished = True
        return []

    _handlers: ClassVar[Mapping[str, _Handler]] = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "content_block_stop": _block_stop,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
    }

    # -- pieces ------------------------------------------------------------------------

    def _text(self, text: str | None) -> list[Item]:
        return [Text(text)] if text else []

    def _thinking(self, text: str | None) -> list[Item]:
        return [Thinking(text, provider=self.endpoint)] if text else []

    @staticmethod
    def _input_fragment(opened: _OpenBlock, fragment: Any) -> None:
        if isinstance(fragment, str):
            opened.fragments.append(fragment)
        elif fragment is not None:  # not text: the call is shown as malformed, not lost
            opened.fragments.append(json.dumps(fragment))
            opened.malformed = True

    def _tool_call(self, opened: _OpenBlock) -> Item:
        """The ``tool_use`` block as a call, or a ``ToolCallError`` showing what came when
        it has no name or its input is not a JSON object (as text or as ``input``)."""
        raw = "".join(opened.fragments)
        initial = opened.initial_input
        parsed: dict[str, Any] | None
        if raw.strip():
            parsed = None if opened.malformed else streamed_arguments(raw)
        elif initial is None or isinstance(initial, dict):
            parsed = initial or {}
        else:
            parsed, raw = None, json.dumps(initial)
        if not opened.name:
            message = f"malformed tool call: no tool name: {raw}"
            return ToolCallError(self.provider, message, tool_call_id=opened.id, raw=raw)
        if parsed is None:
            return ToolCallError(
                self.provider,
                f"malformed tool call: {raw}",
                tool_call_id=opened.id,
                name=opened.name,
                raw=raw,
            )
        return ToolCall(opened.id, opened.name, parsed)

    def _take_usage(self, usage: _Usage | None) -> None:
        """Usage counts are running totals: a later value replaces an earlier one."""
        if usage is None:
            return
        for key in USAGE_KEYS:
            value = getattr(usage, key)
            if value is not None:
                self._usage[key] = value
        details = usage.output_tokens_details
        if details is not None and details.thinking_tokens is not None:
            self._reasoning_tokens = details.thinking_tokens


def _error_text(payload: Any) -> str:
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        return json.dumps(payload)[:500]
    message = str(error.get("message") or "unknown error")
    kind = error.get("type")
    return f"{kind}: {message}" if kind else message
