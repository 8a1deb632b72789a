"""A batch job: many requests submitted as one, answered within a day at the vendor's
batch rate, read back by the user's own ids.

:func:`submit` reserves the budgets, sends the job through its backend (a wire's batch
format bound to the client's connections, or the local engine) and keeps the job's
record in a store; :func:`reattach` finds it there again, in this process or another.
A :class:`BatchJob` polls with backoff (:class:`~cuca.batches.polling.BatchPolling`), asks
for a cancel, and reads the results: a :class:`~cuca.Completion` or a typed error for
every request, in the user's order, the budgets charged once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

import attrs
import trio

from cuca._checks import kind
from cuca.batch_wire import BatchCounts, BatchState, VendorJob
from cuca.cost import batch_rate
from cuca.errors import (
    ConfigurationError,
    CucaError,
    RateLimitError,
    ServerError,
    StoreError,
    TransportError,
)
from cuca.plugins import BudgetWarning
from cuca.store import MemoryStore, Store
from cuca.stream import Completion
from cuca.types import ProviderEndpoint, TokenUsage, UnifiedRequest

from .polling import BatchPolling, never_ran
from .record import RECORD_TTL, Entry, JobRecord, custom_ids, mark_settled, store_key

__all__ = [
    "BatchBackend",
    "BatchGate",
    "BatchJob",
    "BatchResults",
    "BatchStatus",
    "reattach",
    "submit",
]

RESERVATION_TTL = 3 * 86_400.0
"""Seconds a batch's budget reservation is held when its results are never read: the
vendors' 24-hour window, and two days to read the results."""

PROCESS_STORE = MemoryStore()
"""Where jobs are recorded when no store is given: this process only."""


class BatchBackend(Protocol):
    """Where a batch runs: a wire's batch format on the client's connections, or the
    local engine. ``gates`` are the client's plugins; those that are a
    :class:`BatchGate` reserve a vendor batch at submit."""

    @property
    def provider(self) -> ProviderEndpoint: ...

    @property
    def gates(self) -> Sequence[object]: ...

    async def submit(
        self, entries: Sequence[tuple[str, UnifiedRequest]], label: str
    ) -> VendorJob: ...

    async def poll(self, vendor_id: str) -> VendorJob: ...

    async def cancel(self, vendor_id: str) -> VendorJob: ...

    async def results(
        self, job: VendorJob, requests: Mapping[str, UnifiedRequest]
    ) -> dict[str, Completion | CucaError]:
        """Each request's outcome by its ``custom_id``; absent when there is none."""
        ...


@runtime_checkable
class BatchGate(Protocol):
    """A gate that takes part in batches (:class:`~cuca.Budget`): it reserves a whole
    job at submit and is charged its exact cost when the results are read, maybe by
    another process (the reservation is JSON, kept in the job's record)."""

    key: str

    async def reserve_batch(
        self, requests: Sequence[UnifiedRequest], rate: Decimal, ttl: float
    ) -> dict[str, Any]: ...

    async def settle_batch(
        self, reservation: Mapping[str, Any], usd: Decimal, tokens: int
    ) -> list[BudgetWarning]: ...


@attrs.frozen
class BatchStatus:
    """Where a job stands: ``state`` (one list for every vendor), the vendor's own
    word for it, its counts, and the reason a failed job gave."""

    state: BatchState
    vendor_state: str
    counts: BatchCounts
    error: str | None = None

    @classmethod
    def of(cls, job: VendorJob) -> BatchStatus:
        return cls(job.state, job.vendor_state, job.counts, job.error)


class BatchResults(Mapping[str, "Completion | CucaError"]):
    """Every request's outcome by the user's id, in the order they were given: a
    :class:`~cuca.Completion` (the type ``generate`` returns, priced at the batch rate),
    or the error it ended with (a :class:`~cuca.HttpStatusError` of its kind, or a
    :class:`~cuca.BatchError` for a request that never ran). Nothing is missing."""

    def __init__(
        self,
        job_id: str,
        state: BatchState,
        outcomes: dict[str, Completion | CucaError],
        warnings: Sequence[BudgetWarning] = (),
    ) -> None:
        self.job_id = job_id
        self.state = state
        self._outcomes = outcomes
        self.budget_warnings = tuple(warnings)
        """The budget warnings that charging this job crossed."""

    def __getitem__(self, user_id: str) -> Completion | CucaError:
        return self._outcomes[user_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._outcomes)

    def __len__(self) -> int:
        return len(self._outcomes)

    def __repr__(self) -> str:
        done = len(self.completions)
        return f"BatchResults({self.job_id!r}, {self.state.value}, {done}/{len(self)} answered)"

    @property
    def completions(self) -> dict[str, Completion]:
        """The answered requests, in order."""
        return {k: v for k, v in self._outcomes.items() if isinstance(v, Completion)}

    @property
    def errors(self) -> dict[str, CucaError]:
        """The requests without an answer, in order, with the error each ended with."""
        return {k: v for k, v in self._outcomes.items() if isinstance(v, CucaError)}

    @property
    def usage(self) -> TokenUsage:
        """The answered requests' usage, added up."""
        usages = [c.usage for c in self.completions.values() if c.usage is not None]
        return TokenUsage(
            sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages)
        )

    @property
    def cost(self) -> Decimal | None:
        """What the job cost, at the batch rate: the answered requests' exact costs
        added up (a request that never ran or failed is not billed), or ``None`` when
        one answer's cost is unknown."""
        total = Decimal(0)
        for done in self.completions.values():
            cost = done.response.cost
            if cost is None:
                return None
            total += cost
        return total


def ordered(requests: object) -> list[tuple[str, UnifiedRequest]]:
    """The user's requests as (id, request) pairs in their order: a mapping keeps its
    keys, a sequence is numbered ``"0"``, ``"1"``..."""
    if isinstance(requests, Mapping):
        pairs = list(requests.items())
    elif isinstance(requests, Sequence) and not isinstance(requests, str | bytes):
        pairs = [(str(index), request) for index, request in enumerate(requests)]
    else:
        raise ConfigurationError(
            f"a batch takes a mapping of ids to UnifiedRequests or a sequence of them, "
            f"not {kind(requests)}"
        )
    if not pairs:
        raise ConfigurationError("a batch needs at least one request")
    for user_id, request in pairs:
        if not isinstance(user_id, str) or not user_id:
            raise ConfigurationError(
                f"a batch request's id must be a non-empty string, not {kind(user_id)}"
            )
        if not isinstance(request, UnifiedRequest):
            raise ConfigurationError(
                f"batch request {user_id!r} is {kind(request)}, not a UnifiedRequest"
            )
    return pairs


async def submit(
    backend: BatchBackend,
    requests: object,
    *,
    store: Store | None = None,
    label: str = "cuca batch",
    polling: BatchPolling | None = None,
) -> BatchJob:
    """Submit ``requests`` as one job (see :meth:`cuca.CucaClient.batch`)."""
    store = _checked_store(store)
    pairs = ordered(requests)
    sent = [(user_id, r.with_provider(backend.provider)) for user_id, r in pairs]
    customs = custom_ids([user_id for user_id, _ in sent])
    reservations = await _reserve(backend, [r for _, r in sent])
    try:
        vendor = await backend.submit(list(zip(customs, (r for _, r in sent), strict=True)), label)
    except BaseException:
        with trio.CancelScope(shield=True):
            await _release(backend, reservations)
        raise
    entries = tuple(
        Entry(user_id, custom, r.model, r.output_schema)
        for (user_id, r), custom in zip(sent, customs, strict=True)
    )
    job_id = f"{backend.provider.kind}:{vendor.vendor_id}"
    record = JobRecord(
        job_id, backend.provider.kind, vendor.vendor_id, entries, tuple(reservations)
    )
    try:
        await store.set(store_key(job_id), record.to_json(), RECORD_TTL)
    except StoreError as exc:
        raise StoreError(
            f"batch {vendor.vendor_id} was submitted, but its record could not be kept "
            f"(cancel it on the vendor's side, or keep its id): {exc.message}"
        ) from exc
    return BatchJob(backend, store, record, polling or BatchPolling(), vendor)


async def reattach(
    backend: BatchBackend,
    job_id: str,
    *,
    store: Store | None = None,
    polling: BatchPolling | None = None,
) -> BatchJob:
    """The job ``job_id`` again, from its record in ``store`` (see
    :meth:`cuca.CucaClient.batch_job`)."""
    store = _checked_store(store)
    if not isinstance(job_id, str):
        raise ConfigurationError(f"a batch job id is a string, not {kind(job_id)}")
    found = await store.get(store_key(job_id))
    if found is None:
        raise ConfigurationError(
            f"no batch job {job_id!r} in this store: pass the store it was submitted with "
            "(client.batch(..., store=...)); a job kept in the process's memory ends with it"
        )
    record = JobRecord.from_json(found)
    if record.provider != backend.provider.kind:
        raise ConfigurationError(
            f"batch job {job_id!r} ran on {record.provider}, not on this client's "
            f"{backend.provider.kind}"
        )
    return BatchJob(backend, store, record, polling or BatchPolling())


def _checked_store(store: object) -> Store:
    if store is None:
        return PROCESS_STORE
    if not isinstance(store, Store):
        raise ConfigurationError(f"store must be a cuca store, not {kind(store)}")
    return store


def _gates(backend: BatchBackend) -> list[BatchGate]:
    return [gate for gate in backend.gates if isinstance(gate, BatchGate)]


async def _reserve(backend: BatchBackend, requests: list[UnifiedRequest]) -> list[dict[str, Any]]:
    """Each budget's reservation for the whole job, at the vendor's batch rate; on a
    refusal, those already made are given back before the error is raised."""
    rate = batch_rate(backend.provider)
    reservations: list[dict[str, Any]] = []
    try:
        for gate in _gates(backend):
            reservations.append(await gate.reserve_batch(requests, rate, RESERVATION_TTL))
    except BaseException:
        with trio.CancelScope(shield=True):
            await _release(backend, reservations)
        raise
    return reservations


async def _release(backend: BatchBackend, reservations: Sequence[Mapping[str, Any]]) -> None:
    await _settle(backend, reservations, Decimal(0), 0)


async def _settle(
    backend: BatchBackend, reservations: Sequence[Mapping[str, Any]], usd: Decimal, tokens: int
) -> list[BudgetWarning]:
    warnings: list[BudgetWarning] = []
    gates = {gate.key: gate for gate in _gates(backend)}
    for reservation in reservations:
        gate = gates.get(str(reservation.get("budget")))
        if gate is not None:  # a budget this client does not have: held until its ttl
            warnings += await gate.settle_batch(reservation, usd, tokens)
    return warnings


class BatchJob:
    """A submitted batch job (from :meth:`cuca.CucaClient.batch` or
    :meth:`~cuca.CucaClient.batch_job`). ``id`` names it for ``batch_job`` in any
    process that shares the store it was recorded in; ``vendor_id`` is the vendor's own
    id (its console shows it).

    Nothing runs in the background: the job advances on the vendor's side, and this
    object asks where it stands when told to (``status``, ``wait``, ``results``).
    """

    def __init__(
        self,
        backend: BatchBackend,
        store: Store,
        record: JobRecord,
        polling: BatchPolling,
        last: VendorJob | None = None,
    ) -> None:
        self._backend = backend
        self._store = store
        self._record = record
        self._polling = polling
        self._last = last
        self._results: BatchResults | None = None

    @property
    def id(self) -> str:
        return self._record.job_id

    @property
    def vendor_id(self) -> str:
        return self._record.vendor_id

    @property
    def provider(self) -> ProviderEndpoint:
        return self._backend.provider

    @property
    def ids(self) -> tuple[str, ...]:
        """The user's ids of the job's requests, in order."""
        return tuple(entry.user_id for entry in self._record.entries)

    def __repr__(self) -> str:
        state = self._last.state.value if self._last is not None else "unknown"
        return f"BatchJob({self.id!r}, {len(self._record.entries)} requests, {state})"

    async def status(self) -> BatchStatus:
        """Ask the vendor once where the job stands."""
        self._last = await self._backend.poll(self.vendor_id)
        return BatchStatus.of(self._last)

    async def wait(self, polling: BatchPolling | None = None) -> BatchStatus:
        """Poll until the job has ended (completed, failed, expired or cancelled), with
        backoff (``polling``, else the job's). Cancel it as any trio call (a
        ``trio.move_on_after`` around it): it leaves no task behind, and the job goes
        on on the vendor's side."""
        if self._last is not None and self._last.state.ended:
            return BatchStatus.of(self._last)
        policy = polling or self._polling
        delays, failures = policy.delays(), 0
        while True:
            try:
                status = await self.status()
            except (TransportError, ServerError, RateLimitError) as exc:
                failures += 1
                if failures > policy.retries:
                    raise
                await trio.sleep(max(next(delays), getattr(exc, "retry_after", None) or 0.0))
                continue
            failures = 0
            if status.state.ended:
                return status
            await trio.sleep(next(delays))

    async def cancel(self) -> BatchStatus:
        """Ask the vendor to cancel the job. What had not run is cancelled (not billed);
        what was running may still finish: ``wait`` for the end, then read the
        results."""
        self._last = await self._backend.cancel(self.vendor_id)
        return BatchStatus.of(self._last)

    async def results(self) -> BatchResults:
        """Wait for the job to end (as :meth:`wait`), then read every request's outcome,
        by the user's id, in the user's order, and charge the budgets (once, whichever
        process reads the results first). Read once: a second call returns the same."""
        if self._results is not None:
            return self._results
        await self.wait()
        job = self._last
        assert job is not None
        provider = self._backend.provider
        requests = {e.custom_id: e.request(provider) for e in self._record.entries}
        found = await self._backend.results(job, requests)
        vendor = provider.kind
        outcomes: dict[str, Completion | CucaError] = {}
        for entry in self._record.entries:
            outcome = found.get(entry.custom_id)
            outcomes[entry.user_id] = (
                outcome if outcome is not None else never_ran(job.state, job.error, vendor)
            )
        warnings = await self._charge(outcomes)
        self._results = BatchResults(self.id, job.state, outcomes, warnings)
        return self._results

    async def _charge(self, outcomes: Mapping[str, Completion | CucaError]) -> list[BudgetWarning]:
        """Charge the budgets the job's exact cost, if this is the first reading."""
        if not self._record.reservations:
            return []
        key = store_key(self.id)
        if not await self._store.update(key, mark_settled, RECORD_TTL):
            return []
        done = [o for o in outcomes.values() if isinstance(o, Completion)]
        usd = sum((c.response.cost or Decimal(0) for c in done), Decimal(0))
        tokens = sum(c.usage.prompt_tokens + c.usage.completion_tokens for c in done if c.usage)
        return await _settle(self._backend, self._record.reservations, usd, tokens)
