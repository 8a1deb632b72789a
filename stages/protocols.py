"""What the built-in stages need from an adapter, as structural types.

Stages know no vendor: they call whatever object fits these shapes. The provider
adapters in ``cuca.providers`` fit them (their decoders subclass :class:`StreamDecoder`,
which ``cuca.providers`` re-exports: the one definition of a decoder's contract).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cuca.types import TurnSummary

if TYPE_CHECKING:
    from cuca.turn import Item

from .sse import SseEvent

__all__ = ["Framer", "StreamDecoder", "WireRequest"]


class WireRequest(Protocol):
    """An HTTP request to send."""

    @property
    def method(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def body_bytes(self) -> bytes: ...


class Framer(Protocol):
    """Splits response bytes into events."""

    def feed(self, data: bytes) -> list[SseEvent]: ...

    def close(self) -> list[SseEvent]: ...


@runtime_checkable
class StreamDecoder(Protocol):
    """Turns one response's events into items; one instance per turn.

    ``feed`` returns the items an event produced (blocks, or ``CucaError`` instances for
    errors that do not end the turn) and raises a ``CucaError`` for one that does.
    ``close`` is called once when the byte stream ends: it returns what is still pending
    and raises ``StreamIncomplete`` if the stream was cut before the turn was complete.
    ``finished`` turns true once the provider's end marker arrived: the transport then
    stops reading (after a short drain). ``summary`` is what the provider reported about
    the turn (usage, finish reason).
    """

    finished: bool = False

    def feed(self, event: SseEvent) -> list[Item]: ...

    def close(self) -> list[Item]: ...

    def summary(self) -> TurnSummary: ...
