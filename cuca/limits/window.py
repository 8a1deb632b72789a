"""The limiter's arithmetic, as pure changes of one stored state (:data:`cuca.store.Change`).

Each limit is a GCRA bucket (the generic cell rate algorithm, a leaky bucket kept as
one number): ``tat``, the time at which the bucket will be empty again. A limit of
``rate`` units a minute spaces units ``60 / rate`` seconds apart and lets ``capacity``
units go at once. A turn *reserves* its place: the bucket's ``tat`` moves on by its
cost at once, and the turn waits until its slot (``tat - capacity * interval``). Turns
are so admitted in the order they asked, across processes, without polling; a waiter
that is cancelled gives its cost back.

The state is a JSON object: ``{"b": {limit: tat}, "p": pause_until, "l": {holder:
expires}}`` (the buckets, the server's pause, the concurrency leases).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["Bucket", "Reservation", "charge", "lease", "pause", "refund", "release", "reserve"]


@attrs.frozen
class Bucket:
    """One limit: ``name`` (as the user wrote it), units per minute, and how many may
    go at once."""

    name: str
    per_minute: float
    capacity: float

    @property
    def interval(self) -> float:
        return 60.0 / self.per_minute


@attrs.frozen
class Reservation:
    """What :func:`reserve` decided: ``wait`` seconds before the turn may go, because
    of ``limit``; ``refused`` when that wait passes ``max_wait`` (nothing reserved)."""

    wait: float
    limit: str | None
    refused: bool = False


def _state(old: Any) -> dict[str, Any]:
    state = dict(old) if isinstance(old, Mapping) else {}
    state["b"] = dict(state.get("b") or {})
    state["l"] = dict(state.get("l") or {})
    state.setdefault("p", 0.0)
    return state


def reserve(
    old: Any,
    now: float,
    costs: Mapping[Bucket, float],
    max_wait: float | None,
    may_wait: bool = True,
) -> tuple[dict[str, Any], Reservation]:
    """Reserve ``costs`` in their buckets. A bucket with cost 0 is only waited for (the
    output tokens, charged when the turn ends). Refused, with nothing changed, when the
    wait passes ``max_wait`` or the turn may not wait at all (``may_wait``)."""
    state = _state(old)
    buckets = state["b"]
    wait, limit = max(0.0, float(state["p"]) - now), "server" if state["p"] > now else None
    moved: dict[str, float] = {}
    for bucket, cost in costs.items():
        tat = max(float(buckets.get(bucket.name, now)), now)
        new_tat = tat + cost * bucket.interval
        slot = new_tat - bucket.capacity * bucket.interval
        if cost == 0:
            slot = tat - bucket.capacity * bucket.interval
        if slot - now > wait:
            wait, limit = slot - now, bucket.name
        moved[bucket.name] = new_tat
    if wait > 0 and (not may_wait or (max_wait is not None and wait > max_wait)):
        return state, Reservation(wait, limit, refused=True)
    buckets.update(moved)
    return state, Reservation(wait, limit)


def refund(old: Any, costs: Mapping[Bucket, float]) -> tuple[dict[str, Any], None]:
    """Give back what a cancelled waiter reserved."""
    state = _state(old)
    for bucket, cost in costs.items():
        if bucket.name in state["b"]:
            state["b"][bucket.name] -= cost * bucket.interval
    return state, None


def charge(old: Any, now: float, costs: Mapping[Bucket, float]) -> dict[str, Any]:
    """Charge ``costs`` after the fact, without waiting (the exact output tokens, the
    correction of an estimate, negative when it was too high)."""
    state = _state(old)
    buckets = state["b"]
    for bucket, cost in costs.items():
        tat = float(buckets.get(bucket.name, now))
        buckets[bucket.name] = (max(tat, now) if cost > 0 else tat) + cost * bucket.interval
    return state


def pause(old: Any, until: float, requests: Bucket | None) -> dict[str, Any]:
    """Hold every turn until ``until`` (a server said so); the requests bucket then
    starts again from there, spaced as usual."""
    state = _state(old)
    state["p"] = max(float(state["p"]), until)
    if requests is not None:
        tat = float(state["b"].get(requests.name, 0.0))
        start = until + (requests.capacity - 1) * requests.interval
        state["b"][requests.name] = max(tat, start)
    return state


def lease(
    old: Any, now: float, holder: str, limit: int, ttl: float
) -> tuple[dict[str, Any], bool]:
    """Take one of ``limit`` concurrent slots for ``holder`` (expiring after ``ttl``
    seconds, so a crashed process cannot keep a slot), when one is free."""
    state = _state(old)
    leases = {k: v for k, v in state["l"].items() if float(v) > now}
    taken = len(leases) < limit
    if taken:
        leases[holder] = now + ttl
    state["l"] = leases
    return state, taken


def release(old: Any, holder: str) -> dict[str, Any]:
    """Give ``holder``'s slot back."""
    state = _state(old)
    state["l"].pop(holder, None)
    return state
