"""Rate-limit headers read into one :class:`~cuca.turn.RateLimitHint` for cuca's rate
limiter (through :meth:`ProviderAdapter.rate_limits`): every wire's headers together.
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

from collections.abc import Sequence

from cuca.turn import RateLimitHint

from .anthropic.ratelimit import ANTHROPIC_HEADERS
from .chat.ratelimit import OPENAI_HEADERS, parse_duration
from .headers import HeaderFamily, read_hint

__all__ = ["HeaderFamily", "RateLimitHint", "parse_duration", "rate_limit_hint", "read_hint"]


def rate_limit_hint(
    headers: Sequence[tuple[str, str]], now: float | None = None
) -> RateLimitHint | None:
    """The hint in ``headers`` read with every wire's header family (OpenAI's and
    Anthropic's) and ``Retry-After``: for headers whose wire is not known."""
    return read_hint(headers, (OPENAI_HEADERS, ANTHROPIC_HEADERS), now)
