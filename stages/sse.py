"""The server-sent events parser (sans-IO): bytes in, events out.

Placeholder: the parser itself is being written; ``SseEvent`` is final.
"""

from __future__ import annotations

import attrs

__all__ = ["SseEvent", "SseParser"]


@attrs.frozen(slots=True)
class SseEvent:
    """One dispatched event: its ``data`` (data lines joined with LF), its ``event``
    type ("message" when unset), the last event ``id`` seen so far, and ``retry``."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SseParser:
    """Placeholder."""
