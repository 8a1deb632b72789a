"""Loopback servers that run each vendor's batch job as its documented state machine,
on trio's clock (a day-long job passes in milliseconds under ``MockClock``).

- OpenAI (API reference: Batch, Files): a JSONL file uploaded to ``/v1/files`` (multipart,
  ``purpose=batch``), then ``/v1/batches``; ``status`` goes ``validating`` ->
  ``in_progress`` -> ``finalizing`` -> ``completed``, or ``validating`` -> ``failed``,
  ``in_progress`` -> ``expired`` at 24 hours, ``cancelling`` -> ``cancelled`` after a
  cancel; results in an output file and an error file (``batch_expired``,
  ``batch_cancelled`` for what never ran).
- Anthropic (Message Batches): ``processing_status`` ``in_progress`` -> ``canceling`` ->
  ``ended``; ``request_counts``; ``results_url`` JSONL with ``succeeded``, ``errored``,
  ``canceled`` and ``expired`` results.
- Gemini (batch mode): an operation ``batches/{id}`` whose ``metadata.state`` goes
  ``BATCH_STATE_PENDING`` -> ``RUNNING`` -> ``SUCCEEDED`` (or ``FAILED``, ``CANCELLED``,
  ``EXPIRED``), ``batchStats`` as int64 strings, inline responses keyed by
  ``metadata.key``, a request's error a ``google.rpc.Status`` (gRPC's code).

Each vendor's reference is cited in its wire's ``providers/<wire>/batch.py``; the
results come out in reverse order, as every vendor allows, so that cuca's ordering is
tested.

Each answer echoes its request's last user text (``"echo: <text>"``), with usage 10
prompt and 5 completion tokens. ``Plan`` says how a job goes: its phases' lengths, a
validation failure, an expiry, which requests fail, how many run before an end that
cuts them short.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from cuca.testing import RecordedRequest, ReplayServer, Reply, open_replay_server

DAY = 86_400.0
JSON = (("content-type", "application/json"),)
USAGE = (10, 5)


@attrs.define
class Plan:
    """How a job goes, in seconds of trio's clock since it was created."""

    validating: float = 60.0
    running: float = 3_600.0
    finalizing: float = 600.0
    cancelling: float = 30.0
    fail: str | None = None
    """A validation failure: the job fails after ``validating``."""
    expire: bool = False
    """The job never finishes running: it expires at 24 hours."""
    errors: dict[str, tuple[int, str]] = attrs.Factory(dict)
    """custom_id -> (HTTP status, message) for requests that fail."""
    ran: int = 1
    """How many requests (the first, in order) ran before an expiry or a cancel."""


@attrs.define
class Job:
    id: str
    created: float
    requests: list[tuple[str, dict[str, Any]]]
    cancelled_at: float | None = None

    def phase(self, plan: Plan) -> str:
        """One of validating, failed, in_progress, finalizing, completed, expired,
        cancelling, cancelled (OpenAI's names; each server renames them)."""
        now = trio.current_time()
        elapsed = now - self.created
        if self.cancelled_at is not None:
            return "cancelling" if now < self.cancelled_at + plan.cancelling else "cancelled"
        if elapsed < plan.validating:
            return "validating"
        if plan.fail is not None:
            return "failed"
        if plan.expire:
            return "in_progress" if elapsed < DAY else "expired"
        if elapsed < plan.validating + plan.running:
            return "in_progress"
        if elapsed < plan.validating + plan.running + plan.finalizing:
            return "finalizing"
        return "completed"

    def ran(self, plan: Plan) -> list[str]:
        """The custom ids that ran, for a job that has ended."""
        ids = [custom for custom, _ in self.requests]
        return ids if self.phase(plan) == "completed" else ids[: plan.ran]


def echo(body: dict[str, Any]) -> str:
    """The answer to a request: its last user text, echoed."""
    for message in reversed(body.get("messages") or body.get("contents") or []):
        if message.get("role") == "user":
            content = message.get("content", message.get("parts"))
            if isinstance(content, str):
                return f"echo: {content}"
            texts = [part.get("text", "") for part in content if isinstance(part, dict)]
            return "echo: " + "".join(texts)
    return "echo"


def reply_json(value: Any, status: int = 200) -> Reply:
    return Reply(json.dumps(value).encode(), status=status, headers=JSON)


class BatchServer:
    """The shared half: jobs, the plan, the requests seen; a vendor class answers."""

    def __init__(self, plan: Plan | None = None) -> None:
        self.plan = plan or Plan()
        self.jobs: dict[str, Job] = {}
        self.url = ""
        self.polls = 0

    def new_job(self, prefix: str, requests: list[tuple[str, dict[str, Any]]]) -> Job:
        job = Job(f"{prefix}{len(self.jobs) + 1}", trio.current_time(), requests)
        self.jobs[job.id] = job
        return job

    def cancel(self, job: Job) -> None:
        if job.phase(self.plan) in ("validating", "in_progress", "finalizing"):
            job.cancelled_at = trio.current_time()

    def answer(self, request: RecordedRequest) -> Reply:
        raise NotImplementedError


class OpenAiBatchServer(BatchServer):
    """``/v1/files`` and ``/v1/batches``, as OpenAI's Batch API."""

    def __init__(self, plan: Plan | None = None) -> None:
        super().__init__(plan)
        self.files: dict[str, bytes] = {}

    def answer(self, request: RecordedRequest) -> Reply:
        path, method = request.path, request.method
        if method == "POST" and path == "/v1/files":
            return self._upload(request)
        if method == "POST" and path == "/v1/batches":
            body = request.json()
            lines = [json.loads(line) for line in self.files[body["input_file_id"]].splitlines()]
            assert body["completion_window"] == "24h"
            assert all(line["url"] == body["endpoint"] for line in lines)
            assert all(line["method"] == "POST" for line in lines)
            job = self.new_job("batch_", [(line["custom_id"], line["body"]) for line in lines])
            return reply_json(self._batch(job))
        if match := re.fullmatch(r"/v1/batches/([^/]+)(/cancel)?", path):
            job = self.jobs[match[1]]
            if match[2]:
                self.cancel(job)
            else:
                self.polls += 1
            return reply_json(self._batch(job))
        if match := re.fullmatch(r"/v1/files/([^/]+)/content", path):
            return Reply(self._content(match[1]), headers=(("content-type", "application/jsonl"),))
        return reply_json({"error": {"message": f"no route {method} {path}"}}, 404)

    def _upload(self, request: RecordedRequest) -> Reply:
        head = f"content-type: {request.headers['content-type']}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.body)
        fields = {
            part.get_param("name", header="content-disposition"): part
            for part in message.iter_parts()
        }
        assert fields["purpose"].get_content() == "batch"
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = fields["file"].get_payload(decode=True)
        return reply_json({"id": file_id, "object": "file", "purpose": "batch"})

    def _batch(self, job: Job) -> dict[str, Any]:
        phase = job.phase(self.plan)
        ended = phase in ("completed", "expired", "cancelled", "failed")
        ran = job.ran(self.plan) if ended else []
        failed = [c for c in ran if c in self.plan.errors]
        document: dict[str, Any] = {
            "id": job.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "status": phase,
            "completion_window": "24h",
            "request_counts": {
                "total": len(job.requests),
                "completed": len(ran) - len(failed),
                "failed": len(failed) + (len(job.requests) - len(ran) if ended else 0),
            },
            "output_file_id": f"{job.id}-output" if ended and phase != "failed" else None,
            "error_file_id": f"{job.id}-errors" if ended and phase != "failed" else None,
        }
        if phase == "failed":
            document["errors"] = {"data": [{"code": "invalid_request", "message": self.plan.fail}]}
        return document

    def _content(self, file_id: str) -> bytes:
        job_id, _, kind = file_id.rpartition("-")
        job = self.jobs[job_id]
        ran = set(job.ran(self.plan))
        phase = job.phase(self.plan)
        lines = []
        for custom, body in job.requests:
            if custom not in ran:
                if kind == "errors":
                    code = "batch_expired" if phase == "expired" else "batch_cancelled"
                    error = {
                        "code": code,
                        "message": f"This request could not be executed ({code}).",
                    }
                    lines.append({"custom_id": custom, "response": None, "error": error})
            elif custom in self.plan.errors:
                if kind == "errors":
                    status, message = self.plan.errors[custom]
                    error_body = {"error": {"message": message, "type": "invalid_request_error"}}
                    lines.append(
                        {
                            "custom_id": custom,
                            "response": {"status_code": status, "body": error_body},
                            "error": None,
                        }
                    )
            elif kind == "output":
                completion = {
                    "id": f"chatcmpl-{custom}",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": echo(body)},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": USAGE[0],
                        "completion_tokens": USAGE[1],
                        "total_tokens": sum(USAGE),
                    },
                }
                lines.append(
                    {
                        "custom_id": custom,
                        "response": {"status_code": 200, "body": completion},
                        "error": None,
                    }
                )
        lines.reverse()  # "not in the order of the input file"
        return "".join(json.dumps(line) + "\n" for line in lines).encode()


class AnthropicBatchServer(BatchServer):
    """``/v1/messages/batches``, as Anthropic's Message Batches."""

    def answer(self, request: RecordedRequest) -> Reply:
        path, method = request.path, request.method
        assert request.headers.get("anthropic-version")
        if method == "POST" and path == "/v1/messages/batches":
            entries = request.json()["requests"]
            for entry in entries:
                assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", entry["custom_id"])
                assert "stream" not in entry["params"] and entry["params"]["max_tokens"] > 0
            job = self.new_job("msgbatch_", [(e["custom_id"], e["params"]) for e in entries])
            return reply_json(self._batch(job))
        if match := re.fullmatch(r"/v1/messages/batches/([^/]+)(/cancel|/results)?", path):
            job = self.jobs[match[1]]
            if match[2] == "/cancel":
                self.cancel(job)
            elif match[2] == "/results":
                return Reply(self._results(job), headers=(("content-type", "application/binary"),))
            else:
                self.polls += 1
            return reply_json(self._batch(job))
        return reply_json(
            {"type": "error", "error": {"type": "not_found_error", "message": path}}, 404
        )

    def _batch(self, job: Job) -> dict[str, Any]:
        phase = job.phase(self.plan)
        status = {
            "cancelling": "canceling",
            "completed": "ended",
            "expired": "ended",
            "cancelled": "ended",
        }
        processing_status = status.get(phase, "in_progress")
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        if processing_status == "ended":
            for _, kind in self._outcomes(job):
                counts[kind] += 1
        else:
            counts["processing"] = len(job.requests)
        return {
            "id": job.id,
            "type": "message_batch",
            "processing_status": processing_status,
            "request_counts": counts,
            "cancel_initiated_at": "2026-12-02T09:00:00Z" if job.cancelled_at is not None else None,
            "results_url": f"{self.url}/v1/messages/batches/{job.id}/results"
            if processing_status == "ended"
            else None,
        }

    def _outcomes(self, job: Job) -> list[tuple[str, str]]:
        ran, phase = set(job.ran(self.plan)), job.phase(self.plan)
        unran = "expired" if phase == "expired" else "canceled"
        return [
            (c, unran if c not in ran else "errored" if c in self.plan.errors else "succeeded")
            for c, _ in job.requests
        ]

    def _results(self, job: Job) -> bytes:
        bodies = dict(job.requests)
        lines = []
        for custom, kind in self._outcomes(job):
            result: dict[str, Any] = {"type": kind}
            if kind == "succeeded":
                body = bodies[custom]
                result["message"] = {
                    "id": f"msg_{custom}",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [{"type": "text", "text": echo(body)}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": USAGE[0], "output_tokens": USAGE[1]},
                }
            elif kind == "errored":
                _, message = self.plan.errors[custom]
                error = {"type": "invalid_request_error", "message": message}
                result["error"] = {"type": "error", "error": error}
            lines.append({"custom_id": custom, "result": result})
        lines.reverse()  # "results may be in any order"
        return "".join(json.dumps(line) + "\n" for line in lines).encode()


GEMINI_STATES = {
    "validating": "BATCH_STATE_PENDING", "in_progress": "BATCH_STATE_RUNNING",
    "finalizing": "BATCH_STATE_RUNNING", "completed": "BATCH_STATE_SUCCEEDED",
    "failed": "BATCH_STATE_FAILED", "expired": "BATCH_STATE_EXPIRED",
    "cancelling": "BATCH_STATE_RUNNING", "cancelled": "BATCH_STATE_CANCELLED",
}  # fmt: skip


class GeminiBatchServer(BatchServer):
    """``models/{model}:batchGenerateContent`` and ``batches/{id}``, as Gemini's batch mode."""

    def answer(self, request: RecordedRequest) -> Reply:
        path = request.path
        if match := re.fullmatch(r"/v1beta/models/([^/:]+):batchGenerateContent", path):
            batch = request.json()["batch"]
            assert batch["displayName"]
            inline = batch["inputConfig"]["requests"]["requests"]
            job = self.new_job("batches/", [(r["metadata"]["key"], r["request"]) for r in inline])
            return reply_json(self._operation(job, match[1]))
        if match := re.fullmatch(r"/v1beta/(batches/[^/:]+)(:cancel)?", path):
            job = self.jobs[match[1]]
            if match[2]:
                self.cancel(job)
                return reply_json({})
            self.polls += 1
            return reply_json(self._operation(job, "m"))
        return reply_json({"error": {"code": 404, "message": path, "status": "NOT_FOUND"}}, 404)

    def _operation(self, job: Job, model: str) -> dict[str, Any]:
        phase = job.phase(self.plan)
        state = GEMINI_STATES[phase]
        ended = phase in ("completed", "failed", "expired", "cancelled")
        ran = job.ran(self.plan) if ended else []
        failed = [c for c in ran if c in self.plan.errors]
        metadata: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "model": f"models/{model}",
            "state": state,
            "batchStats": {
                "requestCount": str(len(job.requests)),
                "successfulRequestCount": str(len(ran) - len(failed)),
                "failedRequestCount": str(len(failed)),
                "pendingRequestCount": str(0 if ended else len(job.requests)),
            },
        }
        operation: dict[str, Any] = {"name": job.id, "metadata": metadata, "done": ended}
        if phase == "failed":
            operation["error"] = {"code": 3, "message": self.plan.fail}
        elif ended:
            responses = [
                self._response(custom, body) for custom, body in job.requests if custom in ran
            ]
            responses.reverse()  # keyed: cuca must not rely on the order
            metadata["output"] = {"inlinedResponses": {"inlinedResponses": responses}}
        return operation

    def _response(self, custom: str, body: dict[str, Any]) -> dict[str, Any]:
        if custom in self.plan.errors:
            _, message = self.plan.errors[custom]
            error = {"code": 3, "message": message}  # a google.rpc.Status: gRPC's code
            return {"error": error, "metadata": {"key": custom}}
        content = {"role": "model", "parts": [{"text": echo(body)}]}
        usage = {
            "promptTokenCount": USAGE[0],
            "candidatesTokenCount": USAGE[1],
            "totalTokenCount": sum(USAGE),
        }
        response = {
            "candidates": [{"content": content, "finishReason": "STOP"}],
            "usageMetadata": usage,
        }
        return {"response": response, "metadata": {"key": custom}}


@asynccontextmanager
async def serving(server: BatchServer) -> AsyncIterator[ReplayServer]:
    """``server`` on a loopback port for the ``async with``."""
    answer: Callable[[RecordedRequest], Reply] = server.answer
    async with open_replay_server(answer) as replay:
        server.url = replay.url
        yield replay
