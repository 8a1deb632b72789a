"""One JSON request outside a turn: counting a prompt's tokens, reading a server's window.

The transport of a turn streams; these calls are small and whole. They go through the
client's connection pool and the adapter's error boundary (``status_error``), so a
refused call raises the same typed errors a turn would, and a failed connection the
same :class:`~cuca.errors.TransportError` kinds.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from cuca.errors import JsonError

from .http import StatusError, transport_error
from .protocols import WireRequest

__all__ = ["request_json"]


async def request_json(
    http: httpx.AsyncClient, request: WireRequest, status_error: StatusError
) -> Any:
    """Send ``request`` (a GET carries no body) and return the 2xx answer's JSON."""
    content = None if request.method == "GET" else request.body_bytes()
    try:
        response = await http.request(
            request.method, request.url, headers=dict(request.headers), content=content
        )
    except httpx.HTTPError as exc:
        raise transport_error(exc, request.url) from exc
    text = response.text
    if not 200 <= response.status_code < 300:
        raise status_error(response.status_code, text, None)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise JsonError(
            f"{request.url} answered with a body that is not JSON: {text[:200]!r}"
        ) from exc
