"""Anthropic's Message Batches, for the ``/messages`` wire.

The wire, from Anthropic's API reference (Create, Retrieve, Cancel a Message Batch;
Retrieve Message Batch results) and its batch processing guide:

- ``POST {base}/v1/messages/batches`` ``{"requests": [{"custom_id", "params"}]}``;
  ``params`` is exactly the body the adapter's ``encode`` builds for a non-streamed
  turn. ``custom_id`` matches ``^[a-zA-Z0-9_-]{1,64}$``.
- ``GET .../batches/{id}``, ``POST .../batches/{id}/cancel``: a ``message_batch``
  whose ``processing_status`` is ``in_progress``, ``canceling`` or ``ended``, with
  ``request_counts`` (``processing``, ``succeeded``, ``errored``, ``canceled``,
  ``expired``), ``cancel_initiated_at`` once a cancel was asked, and ``results_url``
  once it has ended. Batches expire 24 hours after creation.
- ``GET {results_url}``: JSONL, a line per request, in any order: ``{"custom_id",
  "result"}``, the result's ``type`` one of ``succeeded`` (``message``: the Message a
  non-streamed turn gets, read by the wire's whole-response decoder), ``errored``
  (``error``: an error response, ``{"type": "error", "error": {"type", "message"}}``),
  ``canceled`` and ``expired``.

``ended`` is one word for three ends; cuca tells them apart: cancelled when a cancel
was asked, expired when requests expired, else completed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cuca.batch_wire import (
    BatchCounts,
    BatchState,
    Outcome,
    Send,
    VendorJob,
    WireCall,
    check_job_size,
)
from cuca.errors import BatchCancelled, BatchExpired, CucaError, ProviderError
from cuca.types import UnifiedRequest

from ..base import ProviderAdapter
from ..decoding import error_text, result_lines, stream_error

__all__ = ["MessageBatches", "read_message_batch"]

MAX_REQUESTS = 100_000
MAX_BYTES = 256_000_000
"""Anthropic's limits on one Message Batch ("limited to either 100,000 Message requests
or 256 MB in size, whichever is reached first", the batch processing guide; decimal
megabytes, the stricter reading): the size is the create request's JSON body."""


class MessageBatches:
    """The Message Batches API at ``url`` (``.../v1/messages/batches``): ``adapter``
    encodes each request and reads each answer; ``headers`` are its own (the key, the
    API version)."""

    def __init__(self, adapter: ProviderAdapter, url: str, headers: Mapping[str, str]) -> None:
        self.adapter = adapter
        self.url = url
        self.headers = dict(headers)

    async def submit(
        self, entries: Sequence[tuple[str, UnifiedRequest]], label: str, send: Send
    ) -> VendorJob:
        requests = []
        for custom_id, request in entries:
            params = dict(self.adapter.encode(request.set_stream(False)).body)
            params.pop("stream", None)
            requests.append({"custom_id": custom_id, "params": params})
        body = {"requests": requests}
        size = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
        check_job_size("Anthropic", len(requests), MAX_REQUESTS, size, MAX_BYTES)
        created = await send(WireCall("POST", self.url, self.headers, body))
        return read_message_batch(created)

    async def poll(self, vendor_id: str, send: Send) -> VendorJob:
        url = f"{self.url}/{vendor_id}"
        return read_message_batch(await send(WireCall("GET", url, self._get_headers())))

    async def cancel(self, vendor_id: str, send: Send) -> VendorJob:
        url = f"{self.url}/{vendor_id}/cancel"
        return read_message_batch(await send(WireCall("POST", url, self.headers)))

    def _get_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k != "content-type"}

    async def results(
        self, job: VendorJob, requests: Mapping[str, UnifiedRequest], send: Send
    ) -> dict[str, Outcome]:
        url = job.document.get("results_url") if isinstance(job.document, dict) else None
        if not isinstance(url, str) or not url:
            return {}
        content: bytes = await send(WireCall("GET", url, self._get_headers(), raw=True))
        outcomes: dict[str, Outcome] = {}
        for line in result_lines(content, "anthropic"):
            request = requests.get(line.get("custom_id"))  # type: ignore[arg-type]
            if request is not None:
                outcomes[line["custom_id"]] = self._outcome(line, request)
        return outcomes

    def _outcome(self, line: dict[str, Any], request: UnifiedRequest) -> Outcome:
        found = line.get("result")
        result: dict[str, Any] = found if isinstance(found, dict) else {}
        kind = result.get("type")
        if kind == "succeeded":
            try:
                return self.adapter.whole_answer(request, json.dumps(result.get("message")))
            except CucaError as exc:
                return exc
        if kind == "errored":
            response = result.get("error")
            error = response.get("error") if isinstance(response, dict) else None
            message = error_text(error if error is not None else response)
            return stream_error(
                "anthropic", message, error, json.dumps(line), self.adapter.overflow
            )
        if kind == "expired":
            return BatchExpired("anthropic: the batch expired before this request ran")
        if kind == "canceled":
            return BatchCancelled("anthropic: the batch was cancelled before this request ran")
        return ProviderError("anthropic", f"a batch result of no known type: {line!r:.200}")


def read_message_batch(document: Any) -> VendorJob:
    """A ``message_batch`` as a :class:`VendorJob`."""
    if not isinstance(document, dict) or not isinstance(document.get("id"), str):
        raise ProviderError(
            "anthropic", f"an answer that is not a message batch: {document!r:.200}"
        )
    status = document.get("processing_status")
    counts = {k: int(v or 0) for k, v in (document.get("request_counts") or {}).items()}
    if status == "in_progress":
        state = BatchState.IN_PROGRESS
    elif status == "canceling":
        state = BatchState.CANCELLING
    elif status == "ended":
        if document.get("cancel_initiated_at"):
            state = BatchState.CANCELLED
        elif counts.get("expired"):
            state = BatchState.EXPIRED
        else:
            state = BatchState.COMPLETED
    else:
        raise ProviderError("anthropic", f"a processing_status cuca does not know: {status!r}")
    numbers = BatchCounts(
        total=sum(counts.values()),
        succeeded=counts.get("succeeded", 0),
        errored=counts.get("errored", 0),
        expired=counts.get("expired", 0),
        cancelled=counts.get("canceled", 0),
        processing=counts.get("processing", 0),
    )
    return VendorJob(document["id"], state, status, numbers, None, document)
