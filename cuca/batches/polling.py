"""How often a batch job is asked where it stands, and what a request that never ran
gets in its place: the I/O-free rules of a job's life (the vendor runs the job's own
state machine; cuca only reads it)."""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from cuca._checks import positive_int, real_in, seconds
from cuca.batch_wire import BatchState
from cuca.errors import BatchCancelled, BatchError, BatchExpired, BatchFailed

__all__ = ["BatchPolling", "never_ran"]


@attrs.frozen
class BatchPolling:
    """The backoff of :meth:`~cuca.batches.BatchJob.wait`: the first poll ``first``
    seconds after the one before, each wait ``factor`` times the last, never more than
    ``most`` seconds (the vendors suggest a minute or so between polls of a job that
    runs for hours). A poll that fails with a transport error, a 5xx or a 429 is tried
    again at the next step (after the server's ``Retry-After`` when it gave one), up to
    ``retries`` failures in a row; then the error is raised."""

    first: float = attrs.field(default=5.0, validator=seconds)
    factor: float = attrs.field(default=1.5, validator=real_in(1.0, 100.0))
    most: float = attrs.field(default=60.0, validator=seconds)
    retries: int = attrs.field(default=5, validator=positive_int)

    def delays(self) -> Iterator[float]:
        """The seconds to sleep before each poll after the first, for ever."""
        delay = self.first
        while True:
            yield min(delay, self.most)
            delay = min(delay * self.factor, self.most)


def never_ran(state: BatchState, job_error: str | None, vendor: str) -> BatchError:
    """The error a request gets when the ended job gave no result for it: the job's
    end says why (``state``), and a failed job's own reason (``job_error``) is kept."""
    if state is BatchState.EXPIRED:
        return BatchExpired(f"the {vendor} batch expired before this request ran")
    if state is BatchState.CANCELLED:
        return BatchCancelled(f"the {vendor} batch was cancelled before this request ran")
    if state is BatchState.FAILED:
        return BatchFailed(f"the {vendor} batch failed: {job_error or 'no reason given'}")
    return BatchFailed(f"the {vendor} batch ended without a result for this request")
