"""Non-streamed turns (``UnifiedRequest.stream = False``): one JSON response, decoded by
the same decoder as the stream.

Two pieces make a non-streamed turn look like a streamed one to the rest of the
pipeline:

- :class:`~cuca.stages.framing.JsonOrSse`, every adapter's framer, hands a JSON body
  on whole as one ``JSON_BODY`` event. (A stream decoder given a ``JSON_BODY`` event,
  because a server answered a streamed request with JSON, raises a ``ProviderError``
  saying so.)
- :class:`WholeResponseDecoder`: turns that document into the events the streamed form
  of the same turn would have sent (one function per wire, in each wire's ``whole``
  module), and feeds them to the wire's own stream decoder. Blocks, usage and finish
  reason are then the stream's, by construction; an ``{"error": ...}`` document is the
  error of its kind, as in a stream (:func:`.decoding.stream_error`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from cuca.errors import ProviderError, StreamIncomplete
from cuca.stages.framing import MAX_JSON_BODY, JsonOrSse
from cuca.stages.sse import SseEvent
from cuca.types import TurnSummary, UnifiedRequest

from .base import Item, StreamDecoder
from .decoding import error_text, loads_json, stream_error
from .overflow import any_overflow

__all__ = [
    "MAX_JSON_BODY",
    "Events",
    "JsonOrSse",
    "WholeResponseDecoder",
    "for_request",
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
