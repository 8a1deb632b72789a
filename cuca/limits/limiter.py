"""``RateLimiter``: requests, input and output tokens per minute, and turns in flight,
for one client or many, in one process or across machines (through a shared store)."""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from cuca._checks import kind
from cuca.admission import Counter, estimate_tokens, estimated
from cuca.errors import ConfigurationError, RateLimitError, RateLimitExceeded, StoreError
from cuca.plugins import CucaPlugin, TurnOutcome
from cuca.store import MemoryStore, Store
from cuca.turn import AttemptHead, RateLimitHint
from cuca.types import UnifiedRequest

from . import window
from .window import Bucket

__all__ = ["RateLimiter"]

LEASE_POLL = 0.05
"""Seconds between two looks at another process's concurrency slots."""


def _positive(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{name} must be a positive number, not {value!r}")
    return float(value)


class RateLimiter(CucaPlugin):
    """Admits turns at no more than the given rates; give it to one client or several
    (``CucaClient(..., plugins=[limiter])``, ``FallbackClient``, pools).

    - ``requests_per_minute``: turns are spaced ``60 / rpm`` seconds apart (``burst``
      may go at once, 1 by default);
    - ``input_tokens_per_minute``: each turn is charged its prompt tokens as the client
      counts them (``count_tokens``; the text length / 4 where it cannot) when
      admitted, corrected by its exact usage when it ends (``count_tokens=False``: the
      text-length estimate, without the counting request some backends need);
    - ``output_tokens_per_minute``: charged the exact completion tokens when a turn
      ends; a turn waits while the last ones' output has not drained;
    - ``max_concurrent``: turns in flight at once (a slot is held until the turn ends);
    - ``max_waiters``: turns of this process that may wait at once; ``max_wait``:
      seconds a turn may wait. Past either, :class:`~cuca.errors.RateLimitExceeded`.

    The server steers it: a 429 with ``Retry-After`` (one the client's retry absorbed
    too: every attempt's headers reach the limiter), and the vendors' rate-limit
    headers saying a limit is used up until its reset, pause every turn that shares the
    limiter (a token limit whose size they give is waited out turn by turn instead,
    each turn until its own tokens are back); headers saying ``n`` remain until a
    reset ``t`` seconds away space the next turns ``t / n`` apart until then, or as
    the server's bucket refills when the headers give the whole limit too
    (:func:`cuca.limits.window.server_gap`); a resend waits for the pause and takes a
    request's place. ``store`` shares it between processes (``SqliteStore``,
    ``RedisStore``; in memory by default) under ``key``; ``fail_open=True`` admits
    turns when the store is down instead of failing them with
    :class:`~cuca.errors.StoreError`. ``clock`` is the wall clock (``time.time``).
    """

    name = "rate_limiter"

    def __init__(
        self,
        requests_per_minute: float | None = None,
        input_tokens_per_minute: float | None = None,
        output_tokens_per_minute: float | None = None,
        max_concurrent: int | None = None,
        max_waiters: int | None = None,
        max_wait: float | None = None,
        store: Store | None = None,
        *,
        burst: int = 1,
        key: str = "cuca:ratelimit",
        fail_open: bool = False,
        count_tokens: bool = True,
        lease_ttl: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        rpm = _positive("requests_per_minute", requests_per_minute)
        itpm = _positive("input_tokens_per_minute", input_tokens_per_minute)
        otpm = _positive("output_tokens_per_minute", output_tokens_per_minute)
        for name, value in (("max_concurrent", max_concurrent), ("max_waiters", max_waiters)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ConfigurationError(f"{name} must be an integer >= 0, not {value!r}")
        if max_wait is not None and (not isinstance(max_wait, int | float) or max_wait < 0):
            raise ConfigurationError(f"max_wait must be seconds >= 0, not {max_wait!r}")
        if not isinstance(burst, int) or burst < 1:
            raise ConfigurationError(f"burst must be an integer >= 1, not {burst!r}")
        if store is not None and not isinstance(store, Store):
            raise ConfigurationError(f"store must be a cuca store, not {kind(store)}")
        self.requests = None if rpm is None else Bucket("requests_per_minute", rpm, burst)
        self.input = None if itpm is None else Bucket("input_tokens_per_minute", itpm, itpm)
        self.output = None if otpm is None else Bucket("output_tokens_per_minute", otpm, otpm)
        self.max_concurrent = max_concurrent
        self.max_waiters = max_waiters
        self.max_wait = max_wait
        self.store: Store = store if store is not None else MemoryStore()
        self.key = key
        self.fail_open = fail_open
        self.count_tokens = count_tokens
        self.lease_ttl = lease_ttl
        self.clock = clock
        self._waiting = 0
        self._slot_freed = trio.Event()
        self._lease_lock = trio.Lock()
        self._ttl = max(3600.0, 2 * lease_ttl)

    def __repr__(self) -> str:
        limits = [b for b in (self.requests, self.input, self.output) if b is not None]
        shown = ", ".join(f"{b.name}={b.per_minute:g}" for b in limits)
        return f"RateLimiter({shown}, max_concurrent={self.max_concurrent}, store={self.store!r})"

    @property
    def waiting(self) -> int:
        """Turns of this process waiting to be admitted now."""
        return self._waiting

    async def _update(self, change: Any) -> Any:
        return await self.store.update(self.key, change, self._ttl)

    async def admit(self, request: UnifiedRequest, count: Counter = estimated) -> _Ticket:
        """Wait until ``request`` may go out, and return its permit; raises
        :class:`RateLimitExceeded` rather than wait past ``max_waiters``/``max_wait``.
        ``count`` counts its prompt tokens (only with ``input_tokens_per_minute``)."""
        if not self.count_tokens:
            count = estimated
        estimate = await count(request) if self.input is not None else 0
        server = _server_costs(request, estimate)
        start = trio.current_time()
        try:
            if self.max_concurrent is not None:
                holder = await self._at_once(estimate, server)
                if holder is not None:
                    return _Ticket(self, holder, estimate, server)
            holder = await self._lease() if self.max_concurrent is not None else None
        except StoreError:
            if not self.fail_open:
                raise
            return _Ticket(self, None, 0, broken=True)
        try:  # within what is left of max_wait after the wait for a slot
            await self._reserve(estimate, server, trio.current_time() - start)
        except StoreError:
            if not self.fail_open:
                await self._give_back(holder)
                raise
            return _Ticket(self, holder, 0, broken=True)
        except BaseException:
            await self._give_back(holder)
            raise
        return _Ticket(self, holder, estimate, server)

    async def _at_once(self, estimate: int, server: dict[str, float]) -> str | None:
        """A slot and the reservation in one update, when the turn need not wait for
        either (the common case: one round trip to the store, not two); else ``None``
        and nothing changed."""
        assert self.max_concurrent is not None
        limit, holder, now = self.max_concurrent, uuid.uuid4().hex, self.clock()
        costs = self._costs(estimate)

        def change(old: Any) -> tuple[Any, bool]:
            state, taken = window.lease(old, now, holder, limit, self.lease_ttl)
            if not taken:
                return old, False
            state, reservation = window.reserve(state, now, costs, 0.0, False, server)
            return (old, False) if reservation.refused else (state, True)

        return holder if await self._update(change) else None

    def _costs(self, estimate: int, charging: bool = True) -> dict[Bucket, float]:
        costs: dict[Bucket, float] = {}
        if self.requests is not None:
            costs[self.requests] = 1
        if self.input is not None:
            costs[self.input] = estimate
        if self.output is not None and charging:
            costs[self.output] = 0
        return costs

    async def _reserve(self, estimate: int, server: dict[str, float], waited: float) -> None:
        may_wait = self.max_waiters is None or self._waiting < self.max_waiters
        await self._wait_for(self._costs(estimate), may_wait, server, waited)

    async def _wait_for(
        self,
        costs: dict[Bucket, float],
        may_wait: bool,
        server: dict[str, float],
        waited: float = 0.0,
    ) -> None:
        """Reserve ``costs`` (and the server's pause and pacing, at ``server`` costs),
        then wait for the slot, within what ``max_wait`` leaves after ``waited``
        seconds; a waiter cancelled gives its place back. A turn that waited looks again
        when its slot comes (one more store round trip): a pause the server asked for
        meanwhile holds it too."""
        now = self.clock()
        max_wait = None if self.max_wait is None else max(0.0, self.max_wait - waited)
        reservation: window.Reservation = await self._update(
            lambda old: window.reserve(old, now, costs, max_wait, may_wait, server)
        )
        if reservation.refused:
            wait = waited + reservation.wait
            raise self._refusal(reservation.limit or "server", wait, may_wait)
        if reservation.wait <= 0:
            return
        self._waiting += 1
        slot = now + reservation.wait
        try:
            while True:
                await trio.sleep_until(trio.current_time() + max(0.0, slot - self.clock()))
                held: float | None = await self._update(
                    partial(window.hold, now=self.clock(), slot=slot, server=server)
                )
                if held is None:
                    break
                slot = held
        except BaseException:
            with trio.move_on_after(5) as scope:
                scope.shield = True
                await self._update(lambda old: window.refund(old, costs, slot, server))
            raise
        finally:
            self._waiting -= 1

    async def resend(self, server: dict[str, float]) -> None:
        """An admitted turn's request is sent again (the client's retry): it waits for
        the server's pause like a new turn, and takes a request's place (the server
        counts it), within ``max_wait``."""
        costs: dict[Bucket, float] = {} if self.requests is None else {self.requests: 1}
        try:
            await self._wait_for(costs, True, server)
        except StoreError:
            if not self.fail_open:
                raise

    def _refusal(self, limit: str, wait: float | None, may_wait: bool) -> RateLimitExceeded:
        shown = "an unknown time" if wait is None else f"{wait:.2f} s"
        if not may_wait:
            return RateLimitExceeded(
                "max_waiters",
                wait,
                f"{self._waiting} turns are already waiting (max_waiters={self.max_waiters}); "
                f"{limit} would have made this one wait {shown}",
            )
        return RateLimitExceeded(
            limit, wait, f"{limit}: the wait would be {shown}, past max_wait={self.max_wait} s"
        )

    async def _lease(self) -> str:
        """A concurrency slot, waited for in order (trio's lock is fair), within
        ``max_wait``."""
        assert self.max_concurrent is not None
        limit, holder = self.max_concurrent, uuid.uuid4().hex
        taken = await self._update(  # a free slot is taken at once, even with max_wait=0
            partial(window.lease, now=self.clock(), holder=holder, limit=limit, ttl=self.lease_ttl)
        )
        if taken:
            return holder
        # a waiter from here, behind the lock too (those queued on it count as waiting)
        if self.max_waiters is not None and self._waiting >= self.max_waiters:
            raise self._refusal("max_concurrent", None, False)
        deadline = math.inf if self.max_wait is None else trio.current_time() + self.max_wait
        self._waiting += 1
        try:
            with trio.move_on_at(deadline):
                async with self._lease_lock:
                    while True:
                        taken = await self._update(
                            partial(window.lease, now=self.clock(), holder=holder, limit=limit,
                                    ttl=self.lease_ttl)
                        )
                        if taken:
                            return holder
                        with trio.move_on_after(LEASE_POLL):
                            await self._slot_freed.wait()
        finally:
            self._waiting -= 1
        raise RateLimitExceeded(
            "max_concurrent",
            None,
            f"max_concurrent={limit} turns stayed in flight for max_wait={self.max_wait} s",
        )

    async def _give_back(self, holder: str | None) -> None:
        if holder is None:
            return
        with trio.move_on_after(5) as scope:
            scope.shield = True
            try:
                await self._update(lambda old: (window.release(old, holder), None))
            finally:
                self._slot_freed.set()
                self._slot_freed = trio.Event()

    async def settle(self, holder: str | None, estimate: int, end: TurnOutcome) -> None:
        """The turn has ended: give its slot back, charge its exact tokens, and pause
        everyone when the server refused it with ``Retry-After``."""
        usage = end.response.usage if end.response is not None else None
        costs: dict[Bucket, float] = {}
        if self.input is not None and usage is not None:
            costs[self.input] = usage.prompt_tokens - estimate
        if self.output is not None and usage is not None:
            costs[self.output] = usage.completion_tokens
        error = end.error
        retry_after = error.retry_after if isinstance(error, RateLimitError) else None
        if not costs and retry_after is None and holder is None:
            return
        now = self.clock()

        def change(old: Any) -> tuple[Any, None]:
            state = window.charge(old, now, costs)
            if retry_after is not None:
                state = window.pause(state, now + retry_after, self.requests)
            if holder is not None:
                state = window.release(state, holder)
            return state, None

        try:
            await self._update(change)
        except StoreError:
            if not self.fail_open:
                raise
        finally:
            if holder is not None:
                self._slot_freed.set()
                self._slot_freed = trio.Event()

    async def steer(self, hint: RateLimitHint) -> None:
        """Apply what a response's rate-limit headers say (read by the backend's adapter
        into ``hint``): a limit used up until its reset pauses every turn sharing this
        limiter; ``n`` left until a reset ``t`` seconds away spaces the next turns until
        then (:func:`window.server_gap`)."""
        now = self.clock()
        paced = {
            limit: (left, hint.resets[limit], hint.limits.get(limit))
            for limit, left in hint.remaining.items()
            if hint.resets.get(limit) and (left > 0 or limit in hint.limits)
        }
        if not hint.pause and not paced:
            return
        pause = hint.pause

        def change(old: Any) -> tuple[Any, None]:
            state = old
            for limit, (left, reset, total) in paced.items():
                state = window.pace(state, now, limit, left, reset, total)
            if pause:
                state = window.pause(state, now + pause, self.requests)
            return state, None

        try:
            await self._update(change)
        except StoreError:
            if not self.fail_open:
                raise


def _server_costs(request: UnifiedRequest, prompt: int) -> dict[str, float]:
    """What a turn costs on the server's own limits, for its pacing: a request, its
    prompt tokens (``prompt``, else the text-length estimate) and, for ``tokens``, its
    ``max_tokens`` too (as OpenAI counts it)."""
    prompt = prompt or estimate_tokens(request)
    return {
        "requests": 1,
        "tokens": prompt + (request.max_tokens or 0),
        "input-tokens": prompt,
    }


class _Ticket:
    """One admitted turn's permit."""

    def __init__(
        self,
        limiter: RateLimiter,
        holder: str | None,
        estimate: int,
        server: dict[str, float] | None = None,
        broken: bool = False,
    ) -> None:
        self.limiter = limiter
        self.holder = holder
        self.estimate = estimate
        self.server = server or {}
        self.broken = broken  # admitted without the store (fail_open): only a slot to give back
        self.settled = False

    async def on_head(self, head: AttemptHead) -> None:
        if not self.broken and head.rate_limits is not None:
            await self.limiter.steer(head.rate_limits)

    async def on_resend(self) -> None:
        if not self.broken:
            await self.limiter.resend(self.server)

    async def settle(self, end: TurnOutcome) -> None:
        if self.settled:
            return
        self.settled = True
        if self.broken:  # a slot taken before the store failed goes back, if it can
            if self.holder is not None:
                with contextlib.suppress(StoreError):
                    await self.limiter._give_back(self.holder)
            return
        await self.limiter.settle(self.holder, self.estimate, end)
