"""A pool of servers serving the same model: ``CucaClient(..., base_url=[u1, u2, u3])``.

Each turn goes to the member with the fewest turns in flight (ties: the one that has
started the fewest turns, so that one turn at a time still goes round). A member
whose turn failed before its first item is ejected for a cool-down; once that is over,
one turn probes it (no other turn goes there meanwhile): an answer brings it back, a
failure ejects it for another cool-down. A failure before the first item moves the
turn to the next member, as :class:`~cuca.FallbackClient` moves between clients; a
failure after it is raised, since the caller has already seen part of an answer.

:class:`PoolState` is the I/O-free part (choices, in-flight counts, the breaker), with
time passed in, so that its rules are tested without sleeping.
"""

from __future__ import annotations

import enum
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from cuca.errors import ConfigurationError, ConnectError, CucaError
from cuca.routing.fallback import (
    FallbackOn,
    NextClient,
    StreamingClient,
    default_fallback_on,
    first_answer,
    turn_options,
)
from cuca.stream import ResponseStream, TurnClient
from cuca.turn import Insertion
from cuca.types import UnifiedRequest

if TYPE_CHECKING:
    from cuca.retry import RetryPolicy

__all__ = ["MemberClient", "PoolPolicy", "PoolState"]


class MemberClient(TurnClient, Protocol):
    """What a pool sends a turn to: the turns of one server (the client that owns the
    pool builds them: this module does not know the client), closed with the pool."""

    async def aclose(self) -> None: ...


@attrs.frozen
class PoolPolicy:
    """How a pool treats failing members.

    ``cool_down`` seconds out of the pool after ``failures`` failures in a row (each a
    turn that failed before its first item and that ``fallback_on`` counts, by default
    transport errors, 408, 429 and 5xx); ``attempts`` is how many members one turn
    may try, at most (``None``: every member once).
    """

    cool_down: float = attrs.field(default=10.0, validator=attrs.validators.ge(0.0))
    failures: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    attempts: int | None = None
    fallback_on: FallbackOn = attrs.field(default=default_fallback_on, eq=False)


class Health(enum.Enum):
    """A member's place in the circuit breaker."""

    CLOSED = "closed"  # in the pool
    OPEN = "open"  # ejected until its cool-down is over
    PROBING = "probing"  # one turn is trying it again


@attrs.define(eq=False)
class Member:
    """One server of the pool (``index`` in the list of URLs), and what the pool knows
    of it. Members compare by identity: the same URL twice is two members."""

    index: int
    url: str
    in_flight: int = 0
    started: int = 0
    failures: int = 0
    health: Health = Health.CLOSED
    open_until: float = -math.inf


class PoolState:
    """The pool's bookkeeping: which member a turn goes to, and the breaker."""

    def __init__(self, urls: Sequence[str], policy: PoolPolicy) -> None:
        self.members = [Member(index, url) for index, url in enumerate(urls)]
        self.policy = policy

    def choose(self, now: float, exclude: Sequence[Member] = ()) -> Member | None:
        """The member for the next attempt at ``now`` (``None``: none can take it);
        it counts as started and in flight from here on."""
        candidates = [m for m in self.members if m not in exclude and self._usable(m, now)]
        if not candidates:
            return None
        member = min(candidates, key=lambda m: (m.in_flight, m.started))
        if member.health is Health.OPEN:
            member.health = Health.PROBING
        member.in_flight += 1
        member.started += 1
        return member

    def _usable(self, member: Member, now: float) -> bool:
        if member.health is Health.CLOSED:
            return True
        return member.health is Health.OPEN and now >= member.open_until

    def answered(self, member: Member) -> None:
        """``member``'s turn produced its first item (or ended cleanly)."""
        member.failures = 0
        member.health = Health.CLOSED

    def failed(self, member: Member, now: float) -> None:
        """``member``'s turn failed before its first item."""
        member.failures += 1
        if member.health is Health.PROBING or member.failures >= self.policy.failures:
            member.health = Health.OPEN
            member.open_until = now + self.policy.cool_down

    def done(self, member: Member) -> None:
        """``member``'s turn is over, however it ended."""
        member.in_flight -= 1
        if member.health is Health.PROBING:  # the probe was cancelled before it answered
            member.health = Health.OPEN


class Pool:
    """The pool of one client: its state, and the members' clients."""

    def __init__(
        self,
        urls: Sequence[str],
        policy: PoolPolicy,
        client_for: Callable[[str], MemberClient],
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.state = PoolState(urls, policy)
        self.clients = [client_for(url) for url in urls]
        self.clock = clock

    @asynccontextmanager
    async def generate_stream(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[ResponseStream]:
        """Stream one turn from the first member that answers (``stages`` and
        ``headers`` are the turn's own; ``retry`` and ``fused`` are refused: a pool
        retries on its other servers, and its turns run as its client's)."""
        if retry is not None:
            raise ConfigurationError("a pool retries on its other servers: see PoolPolicy")
        if fused is not None:
            raise ConfigurationError("a pool's turns run as its client's: set fused there")
        state, policy = self.state, self.state.policy
        tried: list[Member] = []
        limit = policy.attempts or len(state.members)

        def failed(error: CucaError) -> None:
            if policy.fallback_on(error):
                state.failed(tried[-1], self.clock())

        def next_attempt() -> NextClient | None:
            if len(tried) == limit:
                return None
            member = state.choose(self.clock(), exclude=tried)
            if member is None:
                if tried:
                    return None
                raise ConnectError("every server of the pool is cooling down")
            tried.append(member)
            return self._attempt(member, stages, headers)

        async with first_answer(next_attempt, request, policy.fallback_on, failed) as stream:
            state.answered(tried[-1])
            yield stream

    @asynccontextmanager
    async def _attempt(
        self, member: Member, stages: Sequence[Insertion[Any]], headers: Mapping[str, str] | None
    ) -> AsyncIterator[StreamingClient]:
        try:
            yield _WithStages(self.clients[member.index], stages, headers)
        finally:
            self.state.done(member)


@attrs.frozen
class _WithStages:
    """A member's client with the turn's own stages and headers bound."""

    client: MemberClient
    stages: Sequence[Insertion[Any]]
    headers: Mapping[str, str] | None = None

    def generate_stream(
        self, request: UnifiedRequest
    ) -> AbstractAsyncContextManager[ResponseStream]:
        options = turn_options(self.stages, None, None, self.headers)
        return self.client.generate_stream(request, **options)
