"""The vendors' rate-limit headers, read into one :class:`~cuca.turn.RateLimitHint` for
cuca's rate limiter (through :meth:`ProviderAdapter.rate_limits`).

OpenAI-style servers (OpenAI, vLLM, DeepSeek and others that copy them) send
``x-ratelimit-remaining-{requests,tokens}`` with ``x-ratelimit-reset-{requests,tokens}``
as a duration (``"1s"``, ``"6m0s"``, ``"20ms"``); Anthropic sends
``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}``
with the reset as an RFC 3339 time; both send the limit itself too
(``x-ratelimit-limit-*``, ``anthropic-ratelimit-*-limit``). A limit whose remaining
count is 0 pauses the limiter until its reset; ``Retry-After`` (seconds or an HTTP date)
pauses it too; a count above 0 with its reset paces the limiter (the next turns spread
until the reset).

Both vendors refill a limit continuously (a token bucket: the reset is when it is whole
again), so with the limit known, ``limit - remaining`` come back evenly until the reset:
a request limit used up pauses only until one request is back (``reset / limit``), not
until the whole reset. A token limit (``tokens``, ``input-tokens``) used up, with its
size sent, is not a pause: the limiter's pacing makes each turn wait for its own tokens
to come back (what a turn needs of it is known only there). Without its size, and for
``output-tokens`` (a turn's output is not known before it ends), it pauses until the
reset.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import datetime

from cuca.retry import parse_retry_after
from cuca.turn import RateLimitHint

__all__ = ["RateLimitHint", "parse_duration", "rate_limit_hint"]

_LIMITS = ("requests", "tokens", "input-tokens", "output-tokens")
# limits every turn is charged on by the limiter's pacing (cuca.limits.limiter), so one
# used up is waited out turn by turn, by each turn's cost, instead of paused for
_PACED_WHEN_OWED = ("tokens", "input-tokens")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def rate_limit_hint(
    headers: Sequence[tuple[str, str]], now: float | None = None
) -> RateLimitHint | None:
    """The hint in ``headers`` (any case), or ``None`` when they carry no rate-limit
    header. ``now`` is the wall-clock time (``time.time()``) for reset times."""
    lowered = {name.lower(): value for name, value in headers}
    current = time.time() if now is None else now
    remaining: dict[str, int] = {}
    resets: dict[str, float] = {}
    totals: dict[str, int] = {}
    pauses: list[float] = []
    for limit in _LIMITS:
        for name, reset in (
            (f"x-ratelimit-{{}}-{limit}", parse_duration),
            (f"anthropic-ratelimit-{limit}-{{}}", lambda text: _until(text, current)),
        ):
            left = _integer(lowered.get(name.format("remaining")))
            if left is None:
                continue
            remaining[limit] = left
            wait = reset(lowered.get(name.format("reset"), ""))
            total = _integer(lowered.get(name.format("limit")))
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


def parse_duration(text: str) -> float | None:
    """OpenAI's reset durations (``"1s"``, ``"6m0s"``, ``"1h2m3.5s"``, ``"20ms"``) in
    seconds, or ``None`` when ``text`` is not one."""
    text = text.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


def _until(text: str, now: float) -> float | None:
    """Seconds from ``now`` to an RFC 3339 time (Anthropic's resets)."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def _integer(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None
