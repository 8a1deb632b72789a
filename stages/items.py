"""The items that travel between the HTTP stages of a turn, besides bytes, events and
blocks (see :mod:`cuca.stages.points` for which flows where)."""

from __future__ import annotations

import attrs

from cuca.types import UnifiedRequest

from .protocols import WireRequest

__all__ = ["EncodedRequest", "ResponseHead"]


@attrs.frozen
class EncodedRequest:
    """What ``encode`` emits: the request as the plugins left it, and the HTTP request
    the adapter built for it (whose ``repr`` hides the key)."""

    request: UnifiedRequest
    http: WireRequest


@attrs.frozen
class ResponseHead:
    """What ``transport`` emits before the body: the request this answers, and the
    response's 2xx status and headers. ``decode`` builds its decoder from it."""

    request: UnifiedRequest
    status: int
    headers: tuple[tuple[str, str], ...] = ()
