"""The local engine's batch: the job's requests run as concurrent turns, which the
engine batches as it batches any concurrent turns (up to ``n_seq`` sequences in one
llama.cpp batch), with the same result shape as a vendor's.

The engine has no queue that outlives a call: the turns run while the job is waited
for (``wait`` or ``results``), in the waiting task. A wait that is cancelled cancels
the turns in flight; the next wait runs what has no outcome yet. The job lives in the
process that submitted it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

import trio

from cuca.batch_wire import BatchCounts, BatchState, VendorJob
from cuca.errors import CucaError
from cuca.stream import Completion
from cuca.types import ProviderEndpoint, UnifiedRequest

__all__ = ["LocalBatches"]

Generate = Callable[[UnifiedRequest], Awaitable[Completion]]


class _LocalJob:
    def __init__(self, entries: Sequence[tuple[str, UnifiedRequest]]) -> None:
        self.entries = list(entries)
        self.outcomes: dict[str, Completion | CucaError] = {}
        self.cancelled = False
        self.scope: trio.CancelScope | None = None

    @property
    def ended(self) -> bool:
        return self.cancelled or len(self.outcomes) == len(self.entries)

    def report(self, vendor_id: str) -> VendorJob:
        done = len(self.outcomes)
        failed = sum(isinstance(o, CucaError) for o in self.outcomes.values())
        left = len(self.entries) - done
        if self.cancelled:
            state = BatchState.CANCELLED
        else:
            state = BatchState.COMPLETED if left == 0 else BatchState.IN_PROGRESS
        counts = BatchCounts(
            total=len(self.entries),
            succeeded=done - failed,
            errored=failed,
            cancelled=left if self.cancelled else 0,
            processing=0 if self.cancelled else left,
        )
        return VendorJob(vendor_id, state, state.value, counts)

    async def run(self, generate: Generate, concurrency: int) -> None:
        """Run every request without an outcome, ``concurrency`` at a time."""
        limiter = trio.CapacityLimiter(concurrency)

        async def one(custom: str, request: UnifiedRequest) -> None:
            async with limiter:
                try:
                    self.outcomes[custom] = await generate(request)
                except CucaError as exc:
                    self.outcomes[custom] = exc

        try:
            with trio.CancelScope() as self.scope:
                async with trio.open_nursery() as nursery:
                    for custom, request in self.entries:
                        if custom not in self.outcomes:
                            nursery.start_soon(one, custom, request)
        finally:
            self.scope = None


_JOBS: dict[str, _LocalJob] = {}
"""The local jobs of this process, by id."""


class LocalBatches:
    """The backend of a local batch: ``generate`` runs one turn through the client
    (its gates included: each turn is admitted and charged as any turn), up to
    ``concurrency`` at once (the model's ``n_seq``: more would only wait in the
    engine's queue)."""

    gates: Sequence[object] = ()

    def __init__(self, generate: Generate, concurrency: int) -> None:
        self.provider = ProviderEndpoint.LOCAL
        self._generate = generate
        self._concurrency = max(1, concurrency)

    async def submit(self, entries: Sequence[tuple[str, UnifiedRequest]], label: str) -> VendorJob:
        vendor_id = uuid.uuid4().hex
        _JOBS[vendor_id] = _LocalJob(entries)
        return _JOBS[vendor_id].report(vendor_id)

    async def poll(self, vendor_id: str) -> VendorJob:
        job = _JOBS.get(vendor_id)
        if job is None:
            message = "a local batch runs in the process that submitted it, which has ended"
            return VendorJob(vendor_id, BatchState.FAILED, "unknown", error=message)
        if not job.ended:
            await job.run(self._generate, self._concurrency)
        return job.report(vendor_id)

    async def cancel(self, vendor_id: str) -> VendorJob:
        job = _JOBS.get(vendor_id)
        if job is None:
            return await self.poll(vendor_id)
        if not job.ended:
            job.cancelled = True
            if job.scope is not None:
                job.scope.cancel()
        return job.report(vendor_id)

    async def results(
        self, job: VendorJob, requests: Mapping[str, UnifiedRequest]
    ) -> dict[str, Completion | CucaError]:
        found = _JOBS.get(job.vendor_id)
        return dict(found.outcomes) if found is not None else {}
