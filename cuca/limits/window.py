"""The limiter's arithmetic, as pure changes of one stored state (:data:`cuca.store.Change`).

Each limit is a GCRA bucket (the generic cell rate algorithm, a leaky bucket kept as
one number): ``tat``, the time at which the bucket will be empty again. A limit of
``rate`` units a minute spaces units ``60 / rate`` seconds apart and lets ``capacity``
units go at once. A turn *reserves* its place: the bucket's ``tat`` moves on by its
cost at once, and the turn waits until its slot (``tat - capacity * interval``). Turns
are so admitted in the order they asked, across processes, without polling; a waiter
that is cancelled gives its cost back.

The server paces it too (:func:`pace`): when a response says ``n`` units of one of its
limits (``"requests"``, ``"tokens"``, ...) remain until a reset ``t`` seconds away, the
next turns are spaced ``t / n`` apart on that limit until the reset, counting the turns
already queued, so no more than ``n`` go out before it; when the response gives the
whole limit ``L`` too, at most ``t / (L - n)`` apart, the server's own refill
(:func:`server_gap`); after the reset, only the configured limits space turns again.

The state is a JSON object: ``{"b": {limit: tat}, "p": pause_until, "l": {holder:
expires}, "s": {server limit: {"gap", "tat", "until"}}, "q": [[slot, {server limit:
cost}], ...]}`` (the buckets, the server's pause, the concurrency leases, the server's
pacing, and the turns reserved that have not gone yet, with what each costs on the
server's limits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "Bucket",
    "Reservation",
    "charge",
    "hold",
    "lease",
    "pace",
    "pause",
    "refund",
    "release",
    "reserve",
]


EPSILON = 1e-6
"""Seconds within which a slot counts as at the server's reset (float sums of gaps)."""


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
    state["s"] = {k: dict(v) for k, v in (state.get("s") or {}).items()}
    state["q"] = list(state.get("q") or [])
    return state


def _current(state: dict[str, Any], now: float) -> None:
    """Drop the server's pacing past its reset, and the queued turns gone already."""
    state["s"] = {k: v for k, v in state["s"].items() if float(v["until"]) > now}
    state["q"] = [entry for entry in state["q"] if float(entry[0]) >= now]


def reserve(
    old: Any,
    now: float,
    costs: Mapping[Bucket, float],
    max_wait: float | None,
    may_wait: bool = True,
    server: Mapping[str, float] | None = None,
) -> tuple[dict[str, Any], Reservation]:
    """Reserve ``costs`` in their buckets, and ``server`` (what the turn costs on each
    of the server's limits) in the server's pacing. A bucket with cost 0 is only waited
    for (the output tokens, charged when the turn ends). Refused, with nothing changed,
    when the wait passes ``max_wait`` or the turn may not wait at all (``may_wait``)."""
    state = _state(old)
    _current(state, now)
    server = server or {}
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
    paced = state["s"]
    for name, entry in paced.items():
        cost = server.get(name, 0)
        if cost > 0:  # once the budget is spent, the reset
            slot, until = max(float(entry["tat"]), now), float(entry["until"])
            if entry.get("owed"):  # nothing left: the turn's own cost comes back first
                slot += cost * float(entry["gap"])
            if slot > until - EPSILON:  # (n gaps of t / n may add up short of t)
                slot = until
            if slot - now > wait:
                wait, limit = slot - now, "server"
    if wait > 0 and (not may_wait or (max_wait is not None and wait > max_wait)):
        return state, Reservation(wait, limit, refused=True)
    at = now + wait
    for bucket, cost in costs.items():  # held past its slot (the server, another limit):
        if cost > 0:  # the bucket counts the turn from when it goes
            moved[bucket.name] = max(moved[bucket.name], at + cost * bucket.interval)
    buckets.update(moved)
    for name, entry in paced.items():
        cost = server.get(name, 0)
        if cost > 0 and at < float(entry["until"]) - EPSILON:  # owed: paid on going
            entry["tat"] = at if entry.get("owed") else at + cost * float(entry["gap"])
    if server:
        state["q"].append([at, dict(server)])
    return state, Reservation(wait, limit)


def refund(
    old: Any,
    costs: Mapping[Bucket, float],
    slot: float | None = None,
    server: Mapping[str, float] | None = None,
) -> tuple[dict[str, Any], None]:
    """Give back what a cancelled waiter reserved (its place at ``slot`` in the
    server's pacing too)."""
    state = _state(old)
    for bucket, cost in costs.items():
        if bucket.name in state["b"]:
            state["b"][bucket.name] -= cost * bucket.interval
    if slot is not None and server:
        queued = [e for e in state["q"] if e[0] == slot and e[1] == dict(server)]
        if queued:
            state["q"].remove(queued[0])
            for name, cost in server.items():
                entry = state["s"].get(name)
                if entry is not None:
                    entry["tat"] = float(entry["tat"]) - cost * float(entry["gap"])
    return state, None


def hold(
    old: Any, now: float, slot: float, server: Mapping[str, float]
) -> tuple[dict[str, Any], float | None]:
    """A waiter's slot (``slot``) has come: the time until which a pause the server
    asked for since holds it (its place in the queue moved there), or ``None``: go."""
    state = _state(old)
    until = float(state["p"])
    if until <= now:
        return state, None
    entry = [slot, dict(server)]
    if entry in state["q"]:
        state["q"].remove(entry)
    if server:
        state["q"].append([until, dict(server)])
    return state, until


def server_gap(remaining: int, reset: float, total: int | None = None) -> float | None:
    """Seconds between turns, per unit of a server's limit, when ``remaining`` units are
    left until ``reset`` seconds from now (``None``: no pacing, a pause's job).

    Without the whole limit (``total``), ``reset / remaining``: no more than what
    remains goes out before the reset. With it, the vendors' bucket refills
    ``total - remaining`` evenly until the reset, one unit each
    ``reset / (total - remaining)`` seconds: that spacing never outruns the refill, so
    the gap is the smaller of the two (a limit nearly used up is not spread over the
    whole reset: 1 request of 60 left, 59 s to the reset, spaces turns 1 s apart, not
    59)."""
    if reset <= 0:
        return None
    refill = reset / (total - remaining) if total is not None and total > remaining else None
    if remaining <= 0:
        return refill
    spread = reset / remaining
    return spread if refill is None else min(spread, refill)


def pace(
    old: Any, now: float, limit: str, remaining: int, reset: float, total: int | None = None
) -> dict[str, Any]:
    """The server says ``remaining`` units of its ``limit`` (of ``total``, when it says)
    are left until ``reset`` seconds from ``now``: space the turns that cost it
    :func:`server_gap` apart until then, after what the turns already queued cost it.
    Without ``total``, no more than ``remaining`` go out before the reset, and
    ``remaining`` 0 is :func:`pause`'s job. With ``total`` and nothing left, the limit
    is owed: each turn waits for its own cost to come back at the refill (a turn of
    500 tokens, 10,000 refilled in 60 s: 3 s), where a pause until the reset would
    hold every turn for all of it."""
    state = _state(old)
    _current(state, now)
    gap = server_gap(remaining, reset, total)
    if gap is None:
        return state
    queued = [(float(slot), float(cost.get(limit, 0))) for slot, cost in state["q"]]
    ahead = sum(cost for _, cost in queued)
    tat = now + ahead * gap
    for slot, cost in queued:
        tat = max(tat, slot + cost * gap)
    old_entry = state["s"].get(limit)
    if old_entry is not None:  # the turns that went since the server counted
        tat = max(tat, float(old_entry["tat"]))
    state["s"][limit] = {"gap": gap, "tat": tat, "until": now + reset, "owed": remaining <= 0}
    return state


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
