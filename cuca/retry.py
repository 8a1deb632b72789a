"""When and how long to wait before sending a failed request again.

What is retried is what the server did not answer, or answered "try again": a
connection that could not be made, a status that says so (408, 409, 429, 5xx), and the
same kinds reported inside a 200 stream before anything of the answer (Anthropic's
``overloaded_error`` event, an OpenAI error frame: :meth:`RetryPolicy.resend_delay`).
Once an item of the answer exists, nothing is retried, so no block is ever yielded
twice; a request the server may be answering (a read timeout, a connection dropped
before the status line) is never sent again.
"""

from __future__ import annotations

import contextvars
import email.utils
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs

from ._checks import of_type, real_in
from .errors import HttpStatusError, RateLimitError

__all__ = ["RetryPolicy", "connect_retries", "refused_moves_on"]

RETRYABLE_STATUSES = frozenset({408, 409, 429, *range(500, 600)})


@attrs.frozen
class RetryPolicy:
    """Jittered exponential backoff that honours ``Retry-After``.

    The n-th retry (n from 0) waits ``initial_delay * 2**n`` seconds, at most
    ``max_delay``, reduced by up to ``jitter`` of itself at random. A ``Retry-After``
    header (seconds or an HTTP date) replaces that wait when it is at most
    ``max_retry_after`` seconds; a server that asks for longer is not retried at all (the
    error is raised at once, rather than hammering a server that asked for an hour).
    ``max_retries=2`` by default, as the vendors' SDKs do; ``RetryPolicy.never()`` turns
    retries off.
    """

    max_retries: int = attrs.field(default=2, validator=of_type(int, what="an integer"))
    initial_delay: float = attrs.field(default=0.5, validator=real_in(0, 3600))
    max_delay: float = attrs.field(default=8.0, validator=real_in(0, 3600))
    jitter: float = attrs.field(default=0.25, validator=real_in(0, 1))
    max_retry_after: float = attrs.field(default=60.0, validator=real_in(0, 86400))
    statuses: frozenset[int] = RETRYABLE_STATUSES
    rng: Callable[[], float] = attrs.field(default=random.random, repr=False, eq=False)

    @classmethod
    def never(cls) -> RetryPolicy:
        return cls(max_retries=0)

    def retries_status(self, status: int) -> bool:
        return status in self.statuses

    def resend_delay(self, error: BaseException | None, attempt: int) -> float | None:
        """Seconds to wait before sending a turn again as retry number ``attempt`` (0 for
        the first), after its answer failed inside the stream with ``error`` before its
        first item; ``None`` when it is not sent again.

        The error the server reported in the stream is treated as its status would be
        (``overloaded_error`` as a 529, ``rate_limit_error`` as a 429): sent again when
        :meth:`retries_status` says so and retries are left, after the backoff or the
        wait the error asked for (``RateLimitError.retry_after``, within
        ``max_retry_after``). Any other error (a bad request in the stream, a malformed
        frame, a cut body) is not."""
        if attempt >= self.max_retries or not isinstance(error, HttpStatusError):
            return None
        if not error.in_stream or not self.retries_status(error.status):
            return None
        hint = error.retry_after if isinstance(error, RateLimitError) else None
        return self.delay(attempt, None if hint is None else str(hint))

    def delay(
        self, attempt: int, retry_after: str | None = None, now: float | None = None
    ) -> float | None:
        """Seconds to wait before retry number ``attempt`` (0 for the first retry), or
        ``None`` when ``retry_after`` asks for more than ``max_retry_after``: give up."""
        hinted = parse_retry_after(retry_after, now)
        if hinted is not None:
            return hinted if hinted <= self.max_retry_after else None
        return self.backoff(attempt)

    def backoff(self, attempt: int) -> float:
        """The jittered exponential wait before retry number ``attempt``."""
        base = min(self.initial_delay * 2.0**attempt, self.max_delay)
        return base * (1 - self.jitter * self.rng())


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from ``now``: a number of seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


_CONNECT_RETRIES: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "cuca_connect_retries", default=True
)


def connect_retries() -> bool:
    """Whether a connection that could not be made at all (refused, no route to the
    host, no such name) is retried per the policy here: ``False`` inside
    :func:`refused_moves_on`."""
    return _CONNECT_RETRIES.get()


@contextmanager
def refused_moves_on() -> Iterator[None]:
    """Within the block, and in the tasks started in it, a connection that could not be
    made is not retried: the turn fails at once with a ``ConnectError``, for a
    :class:`~cuca.FallbackClient` to move to its next client. What a server answered
    (429, 5xx) is retried per the policy as before, and so is a connect timeout."""
    token = _CONNECT_RETRIES.set(False)
    try:
        yield
    finally:
        _CONNECT_RETRIES.reset(token)
