"""Rate-limit headers read into one :class:`~cuca.turn.RateLimitHint`: the machinery every
wire shares (a wire's own headers are a :class:`HeaderFamily` in its folder; this module
knows no vendor). See :mod:`cuca.providers.ratelimit` for what the hint means.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs

from cuca.retry import parse_retry_after
from cuca.turn import RateLimitHint

__all__ = ["HeaderFamily", "read_hint"]

_LIMITS = ("requests", "tokens", "input-tokens", "output-tokens")
# limits every turn is charged on by the limiter's pacing (cuca.limits.limiter), so one
# used up is waited out turn by turn, by each turn's cost, instead of paused for
_PACED_WHEN_OWED = ("tokens", "input-tokens")


@attrs.frozen
class HeaderFamily:
    """One vendor's rate-limit headers: ``name`` is the header of a limit's field, with
    ``{field}`` (``remaining``, ``reset``, ``limit``) and ``{limit}`` (``requests``,
    ``tokens``, ``input-tokens``, ``output-tokens``) to fill in; ``reset`` reads a reset
    value into seconds from ``now`` (``None``: not one)."""

    name: str
    reset: Callable[[str, float], float | None]


def read_hint(
    headers: Sequence[tuple[str, str]],
    families: Sequence[HeaderFamily],
    now: float | None = None,
) -> RateLimitHint | None:
    """The hint in ``headers`` (any case) for the given header ``families`` and
    ``Retry-After``, or ``None`` when they carry none. ``now`` is the wall-clock time
    (``time.time()``) for reset times."""
    lowered = {name.lower(): value for name, value in headers}
    current = time.time() if now is None else now
    remaining: dict[str, int] = {}
    resets: dict[str, float] = {}
    totals: dict[str, int] = {}
    pauses: list[float] = []
    for limit in _LIMITS:
        for family in families:
            left = _integer(lowered.get(family.name.format(field="remaining", limit=limit)))
            if left is None:
                continue
            remaining[limit] = left
            wait = family.reset(
                lowered.get(family.name.format(field="reset", limit=limit), ""), current
            )
            total = _integer(lowered.get(family.name.format(field="limit", limit=limit)))
            if total is not None and total > 0:
                totals[limit] = total
            if wait is not None:
                resets[limit] = wait
            if left <= 0 and wait is not None:
                if limit in totals and limit in _PACED_WHEN_OWED:
                    continue  # the limiter's pacing: each turn waits for its own tokens
                refilled = limit == "requests" and limit in totals
                pauses.append(wait / totals[limit] if refilled else wait)
    retry_after = parse_retry_after(lowered.get("retry-after"), current)
    if retry_after is not None:
        pauses.append(retry_after)
    if not remaining and not pauses:
        return None
    return RateLimitHint(max(pauses) if pauses else None, remaining, resets, totals)


def _integer(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None
