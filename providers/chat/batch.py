"""OpenAI's Batch API, for the ``/chat/completions`` wire (and the Responses one, whose
adapter extends this wire's).

The wire, from OpenAI's API reference (Batch, Files) and its Batch guide:

- ``POST {base}/files`` (``multipart/form-data``: ``purpose=batch``, ``file``): a JSONL
  file, one request a line, ``{"custom_id", "method": "POST", "url": "/v1/chat/completions",
  "body"}``; ``body`` is exactly what the adapter's ``encode`` builds for a non-streamed
  turn. Answers a file object (``id``).
- ``POST {base}/batches`` ``{"input_file_id", "endpoint", "completion_window": "24h",
  "metadata"}``, ``GET {base}/batches/{id}``, ``POST {base}/batches/{id}/cancel``: a
  batch object, whose ``status`` is one of ``validating``, ``failed``, ``in_progress``,
  ``finalizing``, ``completed``, ``expired``, ``cancelling``, ``cancelled``, with
  ``request_counts`` (``total``, ``completed``, ``failed``) and ``errors.data`` (why a
  batch failed validation).
- ``GET {base}/files/{output_file_id}/content`` and ``{error_file_id}/content``: JSONL,
  a line per request, in no set order: ``{"custom_id", "response": {"status_code",
  "body"}, "error"}``. A 200 ``body`` is the ``chat.completion`` a non-streamed turn
  gets, read by the wire's whole-response decoder; another status is that status's
  error; ``error.code`` ``batch_expired`` and ``batch_cancelled`` mark the requests an
  expired or cancelled batch never ran.
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
    Upload,
    VendorJob,
    WireCall,
    check_job_size,
)
from cuca.errors import BatchCancelled, BatchExpired, CucaError, ProviderError
from cuca.types import UnifiedRequest

from ..base import ProviderAdapter
from ..decoding import error_text, result_lines, stream_error

__all__ = ["ChatBatch", "read_batch"]

STATES: Mapping[str, BatchState] = {state.value: state for state in BatchState}
"""OpenAI's ``status`` names are cuca's :class:`BatchState` values."""

NOT_STREAMED = ("stream", "stream_options")
MAX_REQUESTS = 50_000
MAX_BYTES = 200_000_000
"""OpenAI's limits on one batch (Batch guide: "up to 50,000 requests, and a batch input
file can be up to 200 MB in size"; read as decimal megabytes, the stricter reading)."""
"""Fields of the encoded body a batch line leaves out (a batch answer is one JSON)."""


class ChatBatch:
    """The Batch API of an OpenAI server: ``adapter`` encodes each request and reads
    each answer, ``base`` is the server's base URL (``.../v1``), ``route`` the adapter's
    (``chat/completions`` or ``responses``), ``headers`` its auth."""

    def __init__(
        self,
        adapter: ProviderAdapter,
        base: str,
        route: str,
        headers: Mapping[str, str],
        name: str = "openai",
    ) -> None:
        self.adapter = adapter
        self.base = base
        self.endpoint = f"/v1/{route}"
        self.name = name
        self._auth = dict(headers)

    def _headers(self) -> dict[str, str]:
        return dict(self._auth)

    def line(self, custom_id: str, request: UnifiedRequest) -> dict[str, Any]:
        """One request's line of the input file."""
        body = self.adapter.encode(request.set_stream(False)).body
        body = {k: v for k, v in body.items() if k not in NOT_STREAMED}
        return {"custom_id": custom_id, "method": "POST", "url": self.endpoint, "body": body}

    async def submit(
        self, entries: Sequence[tuple[str, UnifiedRequest]], label: str, send: Send
    ) -> VendorJob:
        lines = [json.dumps(self.line(c, r), ensure_ascii=False) for c, r in entries]
        content = ("\n".join(lines) + "\n").encode()
        check_job_size("OpenAI", len(entries), MAX_REQUESTS, len(content), MAX_BYTES)
        upload = Upload("file", "batch.jsonl", content, "application/jsonl", {"purpose": "batch"})
        file = await send(WireCall("POST", f"{self.base}/files", self._headers(), upload=upload))
        file_id = file.get("id") if isinstance(file, dict) else None
        if not isinstance(file_id, str):
            raise ProviderError(self.name, f"the file upload answered {file!r:.200}")
        body = {
            "input_file_id": file_id,
            "endpoint": self.endpoint,
            "completion_window": "24h",
            "metadata": {"label": label[:512]},
        }
        created = await send(WireCall("POST", f"{self.base}/batches", self._headers(), body))
        return read_batch(created, self.name)

    async def poll(self, vendor_id: str, send: Send) -> VendorJob:
        url = f"{self.base}/batches/{vendor_id}"
        return read_batch(await send(WireCall("GET", url, self._headers())), self.name)

    async def cancel(self, vendor_id: str, send: Send) -> VendorJob:
        url = f"{self.base}/batches/{vendor_id}/cancel"
        return read_batch(await send(WireCall("POST", url, self._headers())), self.name)

    async def results(
        self, job: VendorJob, requests: Mapping[str, UnifiedRequest], send: Send
    ) -> dict[str, Outcome]:
        outcomes: dict[str, Outcome] = {}
        for field in ("output_file_id", "error_file_id"):
            file_id = job.document.get(field) if isinstance(job.document, dict) else None
            if not isinstance(file_id, str) or not file_id:
                continue
            url = f"{self.base}/files/{file_id}/content"
            content: bytes = await send(WireCall("GET", url, self._headers(), raw=True))
            for line in result_lines(content, self.name):
                request = requests.get(line.get("custom_id"))  # type: ignore[arg-type]
                if request is not None:
                    outcomes[line["custom_id"]] = self._outcome(line, request)
        return outcomes

    def _outcome(self, line: dict[str, Any], request: UnifiedRequest) -> Outcome:
        error, response = line.get("error"), line.get("response")
        if isinstance(error, dict):
            message = error_text(error)
            if error.get("code") == "batch_expired":
                return BatchExpired(f"{self.name}: {message}")
            if error.get("code") == "batch_cancelled":
                return BatchCancelled(f"{self.name}: {message}")
            return stream_error(self.name, message, error, json.dumps(line), self.adapter.overflow)
        if not isinstance(response, dict) or not isinstance(response.get("status_code"), int):
            return ProviderError(self.name, f"a batch result without a response: {line!r:.200}")
        body = json.dumps(response.get("body"), ensure_ascii=False)
        status = response["status_code"]
        if not 200 <= status < 300:
            return self.adapter.status_error(status, body)
        try:
            return self.adapter.whole_answer(request, body)
        except CucaError as exc:
            return exc


def read_batch(document: Any, vendor: str) -> VendorJob:
    """A batch object as a :class:`VendorJob`."""
    if not isinstance(document, dict) or not isinstance(document.get("id"), str):
        raise ProviderError(vendor, f"an answer that is not a batch object: {document!r:.200}")
    status = document.get("status")
    state = STATES.get(status) if isinstance(status, str) else None
    if state is None:
        raise ProviderError(vendor, f"a batch status cuca does not know: {status!r}")
    counts = document.get("request_counts") or {}
    total, done, failed = (int(counts.get(k) or 0) for k in ("total", "completed", "failed"))
    errors = (document.get("errors") or {}).get("data") or []
    reasons = "; ".join(error_text(e) for e in errors) or None
    return VendorJob(
        document["id"],
        state,
        str(status),
        BatchCounts(total, done, failed, processing=0 if state.ended else total - done - failed),
        reasons,
        document,
    )
