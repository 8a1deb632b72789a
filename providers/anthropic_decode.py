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
from .decoding import read_int, tool_arguments

__all__ = ["AnthropicDecoder"]

USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


@attrs.define
class _OpenBlock:
    """A content block between its start and stop events."""

    kind: str
    id: str = ""
    name: str = ""
    fragments: list[str] = attrs.Factory(list)
    initial_input: Any = None
    signature: str | None = None


_Handler = Callable[["AnthropicDecoder", dict[str, Any]], list[Item]]


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
        payload = loads_json(event.data, self.provider)
        if not isinstance(payload, dict):
            raise ProviderError(self.provider, f"unexpected frame: {event.data[:200]}")
        kind = payload.get("type") or event.event
        if kind == "error" or event.event == "error":
            raise ProviderError(self.provider, _error_text(payload))
        handler = self._handlers.get(kind)
        return handler(self, payload) if handler is not None else []

    def close(self) -> list[Item]:
        if not self.finished:
            raise StreamIncomplete(f"{self.provider} stream ended before message_stop")
        return []

    def summary(self) -> TurnSummary:
        usage = self._usage
        if not usage:
            return TurnSummary(finish_reason=self._stop_reason)
        read = usage.get("cache_read_input_tokens", 0)
        write = usage.get("cache_creation_input_tokens", 0)
        tokens = TokenUsage(
            prompt_tokens=usage.get("input_tokens", 0) + read + write,
            completion_tokens=usage.get("output_tokens", 0),
            reasoning_tokens=self._reasoning_tokens,
        )
        has_cache = "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage
        cache = PromptCacheUsage(read, write) if has_cache else None
        return TurnSummary(tokens, cache, self._stop_reason)

    # -- events ------------------------------------------------------------------------

    def _message_start(self, payload: dict[str, Any]) -> list[Item]:
        message = payload.get("message")
        if isinstance(message, dict):
            self._take_usage(message.get("usage"))
        return []

    def _block_start(self, payload: dict[str, Any]) -> list[Item]:
        block = payload.get("content_block")
        if not isinstance(block, dict):
            return []
        kind = str(block.get("type", ""))
        opened = _OpenBlock(kind, str(block.get("id", "")), str(block.get("name", "")))
        opened.initial_input = block.get("input")
        opened.signature = block.get("signature") or None
        self._open[_index(payload)] = opened
        if kind == "redacted_thinking":
            data = str(block.get("data", ""))
            return [Thinking("", signature=data, provider=self.endpoint, redacted=True)]
        if kind == "text":
            return self._text(block.get("text"))
        if kind == "thinking":
            return self._thinking(block.get("thinking"))
        return []

    def _block_delta(self, payload: dict[str, Any]) -> list[Item]:
        delta = payload.get("delta")
        opened = self._open.get(_index(payload))
        if not isinstance(delta, dict) or opened is None:
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            return self._text(delta.get("text"))
        if kind == "thinking_delta":
            return self._thinking(delta.get("thinking"))
        if kind == "signature_delta":
            opened.signature = str(delta.get("signature") or "") or None
        elif kind == "input_json_delta":
            opened.fragments.append(str(delta.get("partial_json") or ""))
        return []

    def _block_stop(self, payload: dict[str, Any]) -> list[Item]:
        opened = self._open.pop(_index(payload), None)
        if opened is None:
            return []
        if opened.kind == "thinking" and opened.signature:
            return [Thinking("", signature=opened.signature, provider=self.endpoint)]
        if opened.kind == "tool_use":
            return [self._tool_call(opened)]
        return []

    def _message_delta(self, payload: dict[str, Any]) -> list[Item]:
        delta = payload.get("delta")
        if isinstance(delta, dict) and delta.get("stop_reason"):
            self._stop_reason = str(delta["stop_reason"])
        self._take_usage(payload.get("usage"))
        return []

    def _message_stop(self, payload: dict[str, Any]) -> list[Item]:
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

    def _text(self, text: Any) -> list[Item]:
        return [Text(text)] if isinstance(text, str) and text else []

    def _thinking(self, text: Any) -> list[Item]:
        if isinstance(text, str) and text:
            return [Thinking(text, provider=self.endpoint)]
        return []

    def _tool_call(self, opened: _OpenBlock) -> Item:
        raw = "".join(opened.fragments)
        if not raw.strip():
            arguments = opened.initial_input if isinstance(opened.initial_input, dict) else {}
            return ToolCall(opened.id, opened.name, arguments)
        parsed = tool_arguments(raw)
        if parsed is None:
            return ToolCallError(
                self.provider,
                f"malformed tool call: {raw}",
                tool_call_id=opened.id,
                name=opened.name,
                raw=raw,
            )
        return ToolCall(opened.id, opened.name, parsed)

    def _take_usage(self, usage: Any) -> None:
        """Usage counts are running totals: a later value replaces an earlier one."""
        if not isinstance(usage, dict):
            return
        for key in USAGE_KEYS:
            value = read_int(usage.get(key))
            if value is not None:
                self._usage[key] = value
        details = usage.get("output_tokens_details")
        thinking = read_int(details.get("thinking_tokens")) if isinstance(details, dict) else None
        if thinking is not None:
            self._reasoning_tokens = thinking


def _index(payload: dict[str, Any]) -> int:
    return read_int(payload.get("index", 0)) or 0


def _error_text(payload: dict[str, Any]) -> str:
    error = payload.get("error")
    if not isinstance(error, dict):
        return json.dumps(payload)[:500]
    message = str(error.get("message") or "unknown error")
    kind = error.get("type")
    return f"{kind}: {message}" if kind else message
