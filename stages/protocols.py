"""What the built-in stages need from an adapter, as structural types.

Stages know no vendor: they call whatever object fits these shapes. The provider
adapters in ``cuca.providers`` fit them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from cuca.types import TurnSummary

from .sse import SseEvent

__all__ = ["Decoder", "Framer", "WireRequest"]


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


class Decoder(Protocol):
    """Turns events into items; ``finished`` once the end marker arrived."""

    @property
    def finished(self) -> bool: ...

    def feed(self, event: SseEvent) -> list[Any]: ...

    def close(self) -> list[Any]: ...

    def summary(self) -> TurnSummary: ...
