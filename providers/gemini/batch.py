"""Gemini's batch mode, for the ``generateContent`` wire.

The wire, from the Gemini API reference (Batch API: ``models.batchGenerateContent``,
``batches.get``, ``batches.cancel``) and its batch mode guide, as the google-genai SDK
reads it (``batches._BatchJob_from_mldev``):

- ``POST {base}/v1beta/models/{model}:batchGenerateContent`` ``{"batch": {"displayName",
  "inputConfig": {"requests": {"requests": [{"request", "metadata": {"key"}}]}}}}``:
  the requests inline (up to 20 MB), each ``request`` exactly the body the adapter's
  ``encode`` builds. One model per batch. Answers an operation named ``batches/{id}``.
- ``GET {base}/v1beta/batches/{id}``: the operation; its ``metadata`` (a
  ``GenerateContentBatch``) holds ``state``, one of ``BATCH_STATE_PENDING``,
  ``BATCH_STATE_RUNNING``, ``BATCH_STATE_SUCCEEDED``, ``BATCH_STATE_FAILED``,
  ``BATCH_STATE_CANCELLED``, ``BATCH_STATE_EXPIRED``, its ``batchStats``
  (``requestCount``, ``successfulRequestCount``, ``failedRequestCount``,
  ``pendingRequestCount``: int64, so strings) and, once it has ended, ``output``:
  ``inlinedResponses.inlinedResponses`` (``{"response" | "error", "metadata"}`` per
  request, in order) or a ``responsesFile`` (JSONL, ``{"key", "response" | "error"}``
  a line), read at ``{base}/download/v1beta/{file}:download?alt=media``. A failed
  operation carries ``error`` (``{"code", "message"}``).
- ``POST {base}/v1beta/batches/{id}:cancel``: answers an empty object.

Gemini has no "cancelling" state and no per-request expiry: requests without a
response when a batch ended expired or cancelled with it.
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
from cuca.errors import ConfigurationError, CucaError, ProviderError
from cuca.types import UnifiedRequest

from ..base import ProviderAdapter
from ..decoding import error_text, result_lines, stream_error

__all__ = ["GeminiBatches", "read_operation"]

STATES: Mapping[str, BatchState] = {
    "BATCH_STATE_UNSPECIFIED": BatchState.VALIDATING,
    "BATCH_STATE_PENDING": BatchState.VALIDATING,
    "BATCH_STATE_RUNNING": BatchState.IN_PROGRESS,
    "BATCH_STATE_SUCCEEDED": BatchState.COMPLETED,
    "BATCH_STATE_FAILED": BatchState.FAILED,
    "BATCH_STATE_CANCELLED": BatchState.CANCELLED,
    "BATCH_STATE_EXPIRED": BatchState.EXPIRED,
}

MAX_INLINE_BYTES = 20_000_000
"""Gemini's limit on a batch whose requests are sent inline (the batch mode guide: inline
requests for "smaller batches that keep the total request size under 20MB"; decimal
megabytes, the stricter reading); it documents no request count of its own."""


GRPC_STATUS: Mapping[int, int] = {
    3: 400,  # INVALID_ARGUMENT
    4: 504,  # DEADLINE_EXCEEDED
    5: 404,  # NOT_FOUND
    7: 403,  # PERMISSION_DENIED
    8: 429,  # RESOURCE_EXHAUSTED
    9: 400,  # FAILED_PRECONDITION
    11: 400,  # OUT_OF_RANGE
    13: 500,  # INTERNAL
    14: 503,  # UNAVAILABLE
    16: 401,  # UNAUTHENTICATED
}
"""A request's error in a batch is a ``google.rpc.Status``, whose ``code`` is gRPC's:
each as the HTTP status Google's APIs answer it with (``google/rpc/code.proto``)."""


class GeminiBatches:
    """The batch mode of the Gemini server at ``base``: ``adapter`` encodes each
    request and reads each answer; ``headers`` carry the key."""

    def __init__(self, adapter: ProviderAdapter, base: str, headers: Mapping[str, str]) -> None:
        self.adapter = adapter
        self.base = base.rstrip("/")
        self.headers = dict(headers)

    def _headers(self) -> dict[str, str]:
        return dict(self.headers)

    async def submit(
        self, entries: Sequence[tuple[str, UnifiedRequest]], label: str, send: Send
    ) -> VendorJob:
        models = {request.model.removeprefix("models/") for _, request in entries}
        if len(models) != 1:
            raise ConfigurationError(
                f"a Gemini batch runs one model, not {len(models)} ({', '.join(sorted(models))}): "
                "submit one batch per model"
            )
        inline = [
            {"request": self.adapter.encode(request.set_stream(False)).body, "metadata": {"key": c}}
            for c, request in entries
        ]
        batch = {"displayName": label, "inputConfig": {"requests": {"requests": inline}}}
        size = len(json.dumps({"batch": batch}, ensure_ascii=False, separators=(",", ":")).encode())
        check_job_size("Gemini", len(inline), len(inline), size, MAX_INLINE_BYTES)
        url = f"{self.base}/v1beta/models/{models.pop()}:batchGenerateContent"
        created = await send(WireCall("POST", url, self._headers(), {"batch": batch}))
        return read_operation(created)

    async def poll(self, vendor_id: str, send: Send) -> VendorJob:
        url = f"{self.base}/v1beta/{vendor_id}"
        return read_operation(await send(WireCall("GET", url, self._headers())))

    async def cancel(self, vendor_id: str, send: Send) -> VendorJob:
        url = f"{self.base}/v1beta/{vendor_id}:cancel"
        await send(WireCall("POST", url, self._headers(), {}))
        return await self.poll(vendor_id, send)

    async def results(
        self, job: VendorJob, requests: Mapping[str, UnifiedRequest], send: Send
    ) -> dict[str, Outcome]:
        output = _metadata(job.document).get("output") or {}
        if not isinstance(output, dict):
            return {}
        inline = (output.get("inlinedResponses") or {}).get("inlinedResponses")
        if isinstance(inline, list):
            order = list(requests)
            keyed = [
                (_key(item) or (order[index] if index < len(order) else ""), item)
                for index, item in enumerate(inline)
            ]
        elif isinstance(output.get("responsesFile"), str):
            url = f"{self.base}/download/v1beta/{output['responsesFile']}:download?alt=media"
            content: bytes = await send(WireCall("GET", url, self._headers(), raw=True))
            keyed = [(str(line.get("key", "")), line) for line in result_lines(content, "gemini")]
        else:
            return {}
        return {key: self._outcome(item, requests[key]) for key, item in keyed if key in requests}

    def _outcome(self, item: Any, request: UnifiedRequest) -> Outcome:
        if not isinstance(item, dict):
            return ProviderError("gemini", f"a batch response cuca cannot read: {item!r:.200}")
        error = item.get("error")
        if isinstance(error, dict):
            message = error_text(error)
            code = error.get("code")
            if type(code) is int and code in GRPC_STATUS:
                error = {**error, "code": GRPC_STATUS[code]}
            return stream_error("gemini", message, error, json.dumps(item), self.adapter.overflow)
        try:
            return self.adapter.whole_answer(request, json.dumps(item.get("response")))
        except CucaError as exc:
            return exc


def _metadata(operation: Any) -> dict[str, Any]:
    metadata = operation.get("metadata") if isinstance(operation, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def _key(item: Any) -> str | None:
    metadata = item.get("metadata") if isinstance(item, dict) else None
    key = metadata.get("key") if isinstance(metadata, dict) else None
    return key if isinstance(key, str) else None


def _count(stats: Mapping[str, Any], name: str) -> int:
    try:
        return int(stats.get(name) or 0)  # int64 fields come as strings
    except (TypeError, ValueError):
        return 0


def read_operation(document: Any) -> VendorJob:
    """A batch operation as a :class:`VendorJob`."""
    name = document.get("name") if isinstance(document, dict) else None
    if not isinstance(name, str):
        raise ProviderError("gemini", f"an answer that is not a batch operation: {document!r:.200}")
    metadata = _metadata(document)
    status = metadata.get("state", "BATCH_STATE_UNSPECIFIED")
    state = STATES.get(status) if isinstance(status, str) else None
    if state is None:
        raise ProviderError("gemini", f"a batch state cuca does not know: {status!r}")
    found = metadata.get("batchStats")
    stats: Mapping[str, Any] = found if isinstance(found, dict) else {}
    counts = BatchCounts(
        total=_count(stats, "requestCount"),
        succeeded=_count(stats, "successfulRequestCount"),
        errored=_count(stats, "failedRequestCount"),
        processing=_count(stats, "pendingRequestCount"),
    )
    error = document.get("error")
    reason = error_text(error) if isinstance(error, dict) else None
    return VendorJob(name, state, status, counts, reason, document)
