"""Non-streamed turns (``UnifiedRequest.stream = False``): one JSON response, decoded by
the same decoder as the stream.

Two pieces make a non-streamed turn look like a streamed one to the rest of the
pipeline:

- :class:`~cuca.providers.framing.JsonOrSse`, every adapter's framer, hands a JSON body
  on whole as one ``JSON_BODY`` event. (A stream decoder given a ``JSON_BODY`` event,
  because a server answered a streamed request with JSON, raises a ``ProviderError``
  saying so.)
- :class:`WholeResponseDecoder`: turns that document into the events the streamed form
  of the same turn would have sent (one function per wire below), and feeds them to
  the wire's own stream decoder. Blocks, usage and finish reason are then the stream's,
  by construction; an ``{"error": ...}`` document is the error of its kind, as in a stream
  (:func:`.decoding.stream_error`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from cuca.errors import ProviderError, StreamIncomplete
from cuca.stages.sse import SseEvent
from cuca.types import TurnSummary, UnifiedRequest

from .base import Item, StreamDecoder
from .decoding import error_text, loads_json, stream_error
from .framing import MAX_JSON_BODY, JsonOrSse
from .overflow import any_overflow

__all__ = [
    "MAX_JSON_BODY",
    "JsonOrSse",
    "WholeResponseDecoder",
    "anthropic_events",
    "chat_events",
    "completion_events",
    "for_request",
    "gemini_events",
    "responses_events",
]

Events = list[tuple[str, Mapping[str, Any] | str]]
"""(event type, payload) pairs, as a stream would have sent them (a string payload is
sent as it is, like ``[DONE]``)."""


def for_request(
    request: UnifiedRequest,
    decoder: StreamDecoder,
    to_events: Callable[[Any], Events],
    provider: str,
) -> StreamDecoder:
    """``decoder`` for a streamed request, else a :class:`WholeResponseDecoder` over it."""
    if request.stream:
        return decoder
    return WholeResponseDecoder(decoder, to_events, provider)


class WholeResponseDecoder(StreamDecoder):
    """Decodes a non-streamed response with ``inner``, the wire's stream decoder, by
    replaying it as the events ``to_events`` says the stream would have sent."""

    def __init__(
        self, inner: StreamDecoder, to_events: Callable[[Any], Events], provider: str
    ) -> None:
        self.inner = inner
        self.to_events = to_events
        self.provider = provider
        self.finished = False

    def feed(self, event: SseEvent) -> list[Item]:
        if self.finished:
            return []
        document = loads_json(event.data, self.provider)
        if isinstance(document, dict) and document.get("error"):
            error = document["error"]
            raise stream_error(self.provider, error_text(error), error, event.data, any_overflow)
        try:
            events = self.to_events(document)
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            message = f"unusable response ({type(exc).__name__}: {exc}): {event.data[:200]}"
            raise ProviderError(self.provider, message) from exc
        items: list[Item] = []
        for name, payload in events:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            items += self.inner.feed(SseEvent(data, name))
        self.finished = True
        return items + self.inner.close()

    def close(self) -> list[Item]:
        if not self.finished:
            raise StreamIncomplete("the response ended before its JSON body was complete")
        return []

    def summary(self) -> TurnSummary:
        return self.inner.summary()


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# -- /chat/completions ---------------------------------------------------------------------


def chat_events(completion: Any) -> Events:
    """A ``chat.completion`` object as one chunk: its message as the delta (tool calls
    indexed in order), its finish reason and usage, then ``[DONE]``."""
    choice = _dict(_list(_dict(completion).get("choices"))[0])
    delta = dict(_dict(choice.get("message")))
    calls = _list(delta.get("tool_calls"))
    if calls:
        delta["tool_calls"] = [{**_dict(c), "index": i} for i, c in enumerate(calls)]
    chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}]}
    if completion.get("usage"):
        chunk["usage"] = completion["usage"]
    return [("message", chunk), ("message", "[DONE]")]


# -- /responses ----------------------------------------------------------------------------


def responses_events(response: Any) -> Events:
    """A ``response`` object as its output items' events and the terminal event."""
    events: Events = []
    for index, item in enumerate(_list(_dict(response).get("output"))):
        events += _output_item_events(index, _dict(item))
    status = response.get("status")
    if status == "failed":
        return [*events, ("response.failed", {"type": "response.failed", "response": response})]
    kind = "response.incomplete" if status == "incomplete" else "response.completed"
    return [*events, (kind, {"type": kind, "response": response})]


def _output_item_events(index: int, item: dict[str, Any]) -> Events:
    kind, item_id = item.get("type"), item.get("id")
    deltas: list[tuple[str, str]] = []
    if kind == "message":
        parts = [_dict(p) for p in _list(item.get("content"))]
        deltas = [("response.output_text.delta", p["text"]) for p in parts if "text" in p]
    elif kind == "reasoning":
        summary = [_dict(p).get("text") for p in _list(item.get("summary"))]
        content = [_dict(p).get("text") for p in _list(item.get("content"))]
        deltas = [("response.reasoning_summary_text.delta", t) for t in summary if t]
        deltas += [("response.reasoning_text.delta", t) for t in content if t]
    where = {"item_id": item_id, "output_index": index}
    events: Events = [
        ("response.output_item.added", {"type": "response.output_item.added", "item": item})
    ]
    events += [(name, {"type": name, **where, "delta": text}) for name, text in deltas]
    done = {"type": "response.output_item.done", "output_index": index, "item": item}
    return [*events, ("response.output_item.done", done)]


# -- Anthropic Messages --------------------------------------------------------------------


def anthropic_events(message: Any) -> Events:
    """A ``message`` object as ``message_start``, one start/delta/stop run per content
    block, ``message_delta`` (stop reason, usage) and ``message_stop``."""
    blocks = _list(_dict(message).get("content"))
    start = {**message, "content": []}
    events: Events = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(blocks):
        events += _block_events(index, _dict(block))
    usage = _dict(message.get("usage"))
    delta = {"stop_reason": message.get("stop_reason")}
    tail = {"type": "message_delta", "delta": delta, "usage": usage}
    return [*events, ("message_delta", tail), ("message_stop", {"type": "message_stop"})]


def _block_events(index: int, block: dict[str, Any]) -> Events:
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    opened = dict(block)
    if kind == "text":
        opened["text"] = ""
        deltas = [{"type": "text_delta", "text": block.get("text", "")}]
    elif kind == "thinking":
        opened["thinking"], opened["signature"] = "", ""
        deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")}]
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        opened["input"] = {}
        partial = json.dumps(block.get("input", {}), ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": partial}]
    start = {"type": "content_block_start", "index": index, "content_block": opened}
    events: Events = [("content_block_start", start)]
    for delta in deltas:
        payload = {"type": "content_block_delta", "index": index, "delta": delta}
        events.append(("content_block_delta", payload))
    stop = {"type": "content_block_stop", "index": index}
    return [*events, ("content_block_stop", stop)]


# -- Gemini and llama.cpp /completion ------------------------------------------------------


def gemini_events(response: Any) -> Events:
    """A ``GenerateContentResponse``: the same shape as each streamed chunk."""
    return [("message", _dict(response))]


def completion_events(result: Any) -> Events:
    """A ``/completion`` result: its text as one partial frame, then the final frame."""
    result = _dict(result)
    partial = {"content": result.get("content", ""), "stop": False}
    return [("message", partial), ("message", {**result, "content": "", "stop": True})]
