"""What a wire's batch format and the batches feature exchange.

A vendor runs a batch job on its own clock; cuca only asks it where the job stands.
Each wire that has batches (``providers/<wire>/batch.py``) reads its vendor's job
object into a :class:`VendorJob` (one :class:`BatchState` for every vendor's names)
and each result line into an :class:`Answer` (the blocks and summary of the wire's
whole-response decoder) or a typed error. The wire asks for I/O through a
:data:`Send` the feature gives it, as an adapter counts tokens: no socket here, so
each wire's format is tested without a server.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import attrs

from .errors import ConfigurationError, CucaError
from .types import Block, TurnSummary, UnifiedRequest

__all__ = [
    "Answer",
    "BatchCounts",
    "BatchState",
    "BatchWire",
    "Outcome",
    "Send",
    "Upload",
    "VendorJob",
    "WireCall",
    "check_job_size",
]


class BatchState(enum.Enum):
    """Where a batch job stands, in OpenAI's words (the longest list of the three
    vendors'; Anthropic's ``processing_status`` and Gemini's ``BatchState`` map onto it:
    see docs/batches.md)."""

    VALIDATING = "validating"
    """Accepted, not started: the input is being checked (Gemini: pending)."""
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    """Every request has run; the results are being written."""
    COMPLETED = "completed"
    """Ended: every request has a result (each may still be an error)."""
    FAILED = "failed"
    """Ended without running: the job as a whole was refused."""
    EXPIRED = "expired"
    """Ended at the vendor's deadline (24 hours): what did not run expired."""
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    """Ended by a cancel: what had not run was cancelled."""

    @property
    def ended(self) -> bool:
        """Whether the job will change no more (its results can be read)."""
        return self in _ENDED


_ENDED = frozenset(
    {BatchState.COMPLETED, BatchState.FAILED, BatchState.EXPIRED, BatchState.CANCELLED}
)


@attrs.frozen
class BatchCounts:
    """How many of a job's requests are where, as the vendor counts them (a vendor
    that does not count one kind leaves it 0)."""

    total: int = 0
    succeeded: int = 0
    errored: int = 0
    expired: int = 0
    cancelled: int = 0
    processing: int = 0


@attrs.frozen
class VendorJob:
    """A vendor's batch job as its wire read it: its id, where it stands, its counts,
    the reason a failed job gives, and the vendor's own object (``document``), handed
    back to the wire to fetch the results."""

    vendor_id: str
    state: BatchState
    vendor_state: str
    counts: BatchCounts = BatchCounts()
    error: str | None = None
    document: Any = attrs.field(default=None, repr=False, eq=False)


@attrs.frozen
class Answer:
    """One request's whole response, decoded by its wire's decoder: the items a turn
    would have yielded, and its summary (usage, finish reason)."""

    items: tuple[Block | CucaError, ...]
    summary: TurnSummary


Outcome: TypeAlias = Answer | CucaError
"""What a batch gives for one request: its answer, or the error it ended with."""


@attrs.frozen
class Upload:
    """A file sent as ``multipart/form-data`` (OpenAI's ``/files``): its field name,
    file name, bytes and content type, and the form's other fields."""

    name: str
    filename: str
    content: bytes = attrs.field(repr=False)
    content_type: str
    fields: Mapping[str, str] = attrs.field(factory=dict)


def _redacted(headers: Mapping[str, str]) -> str:
    return repr(sorted(headers))  # the names only: one holds the key


@attrs.frozen
class WireCall:
    """One HTTP request of a batch's life: a JSON ``body`` or an ``upload`` (or
    neither, for a GET); ``raw`` asks for the answer's bytes (a results file) rather
    than its JSON. ``repr`` never shows header values."""

    method: str
    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=_redacted)
    body: Any = attrs.field(default=None, repr=False)
    upload: Upload | None = None
    raw: bool = False


Send: TypeAlias = Callable[[WireCall], Awaitable[Any]]
"""Sends a call and returns the 2xx answer (its JSON, or its bytes when ``raw``);
any other status raises the adapter's typed error, a failed connection a
:class:`~cuca.errors.TransportError`."""


class BatchWire(Protocol):
    """A wire's batch format: submit, poll, cancel, and read the results of a job.
    ``entries`` pair each request with the id the vendor will echo (``custom_id``)."""

    async def submit(
        self, entries: Sequence[tuple[str, UnifiedRequest]], label: str, send: Send
    ) -> VendorJob:
        """Create the job (uploading its input first where the vendor needs a file)."""
        ...

    async def poll(self, vendor_id: str, send: Send) -> VendorJob:
        """Where the job stands now."""
        ...

    async def cancel(self, vendor_id: str, send: Send) -> VendorJob:
        """Ask the vendor to cancel the job; it may take a while to end."""
        ...

    async def results(
        self, job: VendorJob, requests: Mapping[str, UnifiedRequest], send: Send
    ) -> dict[str, Outcome]:
        """Each request's outcome by its ``custom_id``, for an ended job: the ids the
        vendor gave no result for are absent (the feature says why)."""
        ...


def check_job_size(vendor: str, requests: int, most: int, size: int, most_bytes: int) -> None:
    """Refuse, before any request, a job over ``vendor``'s documented limits: more than
    ``most`` requests, or an input of more than ``most_bytes`` bytes (``size``, as it
    would be sent). One call is one vendor job (docs/batches.md says why cuca does not
    split one): a ``ConfigurationError`` saying by how much and what to do."""
    if requests > most:
        raise ConfigurationError(
            f"{vendor} runs at most {most:,} requests in one batch; this one has "
            f"{requests:,}: submit it as {-(-requests // most)} batches"
        )
    if size > most_bytes:
        raise ConfigurationError(
            f"{vendor} takes a batch's input of at most {most_bytes / 1e6:,.0f} MB; this "
            f"one is {size / 1e6:,.1f} MB: submit it as {-(-size // most_bytes)} batches "
            "or more"
        )
