"""Rate-limit headers read into one :class:`~cuca.turn.RateLimitHint` for cuca's rate
limiter (through :meth:`ProviderAdapter.rate_limits`): the machinery every wire shares.
Which headers a vendor sends, and how it writes a reset, is its wire's: a
:class:`HeaderFamily` in ``providers/chat/ratelimit.py`` (OpenAI's ``x-ratelimit-*``) and
``providers/anthropic/ratelimit.py`` (``anthropic-ratelimit-*``); ``Retry-After`` (seconds
or an HTTP date) is read on every wire.

A limit whose remaining count is 0 pauses the limiter until its reset; ``Retry-After``
pauses it too; a count above 0 with its reset paces the limiter (the next turns spread
until the reset). Both vendors refill a limit continuously (a token bucket: the reset is
when it is whole again), so with the limit known, ``limit - remaining`` come back evenly
until the reset: a request limit used up pauses only until one request is back
(``reset / limit``), not until the whole reset. A token limit (``tokens``,
``input-tokens``) used up, with its size sent, is not a pause: the limiter's pacing makes
each turn wait for its own tokens to come back (what a turn needs of it is known only
there). Without its size, and for ``output-tokens`` (a turn's output is not known before
it ends), it pauses until the reset.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs

from cuca.retry import parse_retry_after
from cuca.turn import RateLimitHint

__all__ = ["HeaderFamily", "RateLimitHint", "parse_duration", "rate_limit_hint", "read_hint"]

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


def rate_limit_hint(
    headers: Sequence[tuple[str, str]], now: float | None = None
) -> RateLimitHint | None:
    """The hint in ``headers`` read with every wire's header family (OpenAI's and
    Anthropic's) and ``Retry-After``: for headers whose wire is not known."""
    from .anthropic.ratelimit import ANTHROPIC_HEADERS
    from .chat.ratelimit import OPENAI_HEADERS

    return read_hint(headers, (OPENAI_HEADERS, ANTHROPIC_HEADERS), now)


def parse_duration(text: str) -> float | None:
    """OpenAI's reset durations (``"1s"``, ``"6m0s"``, ``"20ms"``) in seconds, or
    ``None`` (:func:`cuca.providers.chat.ratelimit.parse_duration`)."""
    from .chat.ratelimit import parse_duration as parse

    return parse(text)


def _integer(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None
