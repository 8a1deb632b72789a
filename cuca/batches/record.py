"""A batch job's record in a store: what a process that did not submit the job needs
to read its results (the user's ids in order, the id the vendor echoes for each, the
model and output schema each answer is read with) and to charge its budget once.

The record is JSON under ``cuca:batch:<job id>``; the functions that change it are pure
(:data:`cuca.store.Change`), so two processes reading one job's results charge it once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from cuca.convert import structure, unstructure
from cuca.errors import ConfigurationError
from cuca.types import OutputSchema, ProviderEndpoint, UnifiedRequest

__all__ = ["Entry", "JobRecord", "custom_ids", "mark_settled", "store_key"]

RECORD_TTL = 30 * 86_400.0
"""Seconds a record is kept: Anthropic keeps a batch's results 29 days, OpenAI its
files until they are deleted."""

_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""The ids every vendor echoes as they are (Anthropic's ``custom_id`` rule, the
strictest of the three)."""


def store_key(job_id: str) -> str:
    return f"cuca:batch:{job_id}"


def custom_ids(ids: Sequence[str]) -> list[str]:
    """The id each request is sent under: the user's own when every one is plain
    (letters, digits, ``_`` and ``-``, up to 64), so the vendor's console shows them;
    else ``r0``, ``r1``... by place (the record maps them back)."""
    if all(_PLAIN_ID.fullmatch(user_id) for user_id in ids):
        return list(ids)
    return [f"r{index}" for index in range(len(ids))]


@attrs.frozen
class Entry:
    """One request of a job as its record keeps it: the user's id, the id sent to the
    vendor, and what its answer is read with (the model and the output schema; a
    schema's class is not kept, so a reattached job parses into plain JSON)."""

    user_id: str
    custom_id: str
    model: str
    schema: OutputSchema | None = None

    def request(self, provider: ProviderEndpoint) -> UnifiedRequest:
        """A request standing for the one sent, as far as reading its answer goes."""
        request = UnifiedRequest.new(self.model).with_provider(provider).set_stream(False)
        return request.set_output_schema(self.schema) if self.schema is not None else request


@attrs.frozen
class JobRecord:
    """What a store keeps of a job. ``reservations`` are the budgets' reservations made
    at submit (settled when the results are read); ``settled`` says they were."""

    job_id: str
    provider: str
    vendor_id: str
    entries: tuple[Entry, ...]
    reservations: tuple[Mapping[str, Any], ...] = ()
    settled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "provider": self.provider,
            "vendor_id": self.vendor_id,
            "entries": [
                [
                    e.user_id,
                    e.custom_id,
                    e.model,
                    None if e.schema is None else unstructure(e.schema),
                ]
                for e in self.entries
            ],
            "reservations": [dict(r) for r in self.reservations],
            "settled": self.settled,
        }

    @classmethod
    def from_json(cls, value: Any) -> JobRecord:
        try:
            entries = tuple(
                Entry(
                    user, custom, model, None if schema is None else structure(schema, OutputSchema)
                )
                for user, custom, model, schema in value["entries"]
            )
            return cls(
                str(value["job_id"]),
                str(value["provider"]),
                str(value["vendor_id"]),
                entries,
                tuple(value.get("reservations") or ()),
                bool(value.get("settled")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"a batch job record that cuca cannot read: {exc}") from None


def mark_settled(old: Any) -> tuple[Any, bool]:
    """Mark a record settled; ``True`` for the one caller that settled it (a missing
    record, expired or deleted, is left missing and settles nothing)."""
    if not isinstance(old, Mapping) or old.get("settled"):
        return old, False
    return {**old, "settled": True}, True
