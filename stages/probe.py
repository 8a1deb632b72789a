"""One request outside a turn: counting a prompt's tokens, reading a server's window, a
batch job's calls (a file uploaded, a job polled, a results file read).

The transport of a turn streams; these calls are small and whole. They go through the
client's connection pool and the adapter's error boundary (``status_error``), so a
refused call raises the same typed errors a turn would, and a failed connection the
same :class:`~cuca.errors.TransportError` kinds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from cuca.batch_wire import WireCall
from cuca.errors import JsonError
from cuca.retry import parse_retry_after

from .http import StatusError, transport_error
from .protocols import WireRequest

__all__ = ["request_call", "request_json"]


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


async def request_call(
    http: httpx.AsyncClient, call: WireCall, status_error: StatusError, headers: Mapping[str, str]
) -> Any:
    """Send one call of a batch job (``headers``: the client's extra ones, added) and
    return the 2xx answer: its bytes when ``call.raw``, else its JSON."""
    sent = {**call.headers, **headers}
    files = data = content = None
    if call.upload is not None:
        upload = call.upload
        files = {upload.name: (upload.filename, upload.content, upload.content_type)}
        data = dict(upload.fields)
    elif call.body is not None:
        content = json.dumps(call.body, ensure_ascii=False, separators=(",", ":")).encode()
        sent["content-type"] = "application/json"
    try:
        response = await http.request(
            call.method, call.url, headers=sent, content=content, files=files, data=data
        )
    except httpx.HTTPError as exc:
        raise transport_error(exc, call.url) from exc
    if not 200 <= response.status_code < 300:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        raise status_error(response.status_code, response.text, retry_after)
    if call.raw:
        return response.content
    try:
        return json.loads(response.text)
    except (ValueError, RecursionError) as exc:
        raise JsonError(
            f"{call.url} answered with a body that is not JSON: {response.text[:200]!r}"
        ) from exc

