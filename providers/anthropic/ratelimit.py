"""Anthropic's rate-limit headers:
``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset,limit}``,
the reset an RFC 3339 time. Read by :mod:`cuca.providers.ratelimit`.
"""

from __future__ import annotations

from datetime import datetime

from ..headers import HeaderFamily

__all__ = ["ANTHROPIC_HEADERS", "seconds_until"]


def seconds_until(text: str, now: float) -> float | None:
    """Seconds from ``now`` to an RFC 3339 time (Anthropic's resets), or ``None``."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


ANTHROPIC_HEADERS = HeaderFamily("anthropic-ratelimit-{limit}-{field}", seconds_until)
"""``anthropic-ratelimit-tokens-remaining``, ``-reset``, ``-limit``."""
