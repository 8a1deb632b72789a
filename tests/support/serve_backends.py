"""A scripted backend for the server's tests: it yields the batches it is given, can be
held before its first item (a long prefill) or between two batches, and records the
requests it ran and whether each turn was cancelled."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from cuca.errors import CucaError
from cuca.turn import Item
from cuca.types import ProviderEndpoint, TokenCount, TokenUsage, UnifiedRequest, UnifiedResponse


class _Stream:
    def __init__(self, backend: ScriptedBackend, request: UnifiedRequest) -> None:
        self.backend = backend
        self.request = request
        self.batches = list(backend.batches)
        self.response: UnifiedResponse | None = None

    async def receive_batch(self) -> Sequence[Item]:
        backend = self.backend
        taken = len(backend.batches) - len(self.batches)
        if (taken == 0 and backend.hold) or taken == backend.hold_after:
            backend.waiting.set()
            await backend.release.wait()
        if not self.batches:
            if backend.error is not None:
                raise backend.error
            self.response = UnifiedResponse(
                ProviderEndpoint.LOCAL, self.request.model, backend.usage, None, backend.finish
            )
            raise StopAsyncIteration
        return self.batches.pop(0)

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> Item:  # the whole-response path reads item by item
        batch = await self.receive_batch()
        if len(batch) > 1:
            self.batches.insert(0, list(batch[1:]))
        return batch[0]


class ScriptedBackend:
    """Answers every turn with ``batches`` then ``usage`` and ``finish`` (or raises
    ``error`` at the end). With ``hold`` it waits for :attr:`release` before its
    first batch (``hold_after``: before that batch instead); :attr:`waiting` is set
    when it does, :attr:`cancelled` when a turn ended by cancellation."""

    def __init__(
        self,
        batches: Sequence[Sequence[Item]],
        *,
        usage: TokenUsage | None = None,
        finish: str = "stop",
        error: CucaError | None = None,
        hold: bool = False,
        hold_after: int | None = None,
    ) -> None:
        self.batches = [list(b) for b in batches]
        self.usage = usage or TokenUsage(7, 3)
        self.finish = finish
        self.error = error
        self.hold = hold
        self.hold_after = hold_after
        self.waiting = trio.Event()
        self.release = trio.Event()
        if not hold and hold_after is None:
            self.release.set()
        self.cancelled = trio.Event()
        self.requests: list[UnifiedRequest] = []

    @asynccontextmanager
    async def generate_stream(self, request: UnifiedRequest) -> AsyncIterator[_Stream]:
        self.requests.append(request)
        try:
            yield _Stream(self, request)
        except trio.Cancelled:
            self.cancelled.set()
            raise
        except BaseException as exc:
            if any(isinstance(e, trio.Cancelled) for e in _leaves(exc)):
                self.cancelled.set()
            raise

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount:
        self.requests.append(request)
        return TokenCount(len(request.messages) * 10, exact=True, method="scripted")


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]
