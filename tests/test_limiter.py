"""``RateLimiter`` driven directly (admit, settle, steer, resend), without a server:
what docs/limits.md promises of each, on trio's mock clock, in milliseconds. The
limiter behind a client, over loopback, is tests/test_limits.py's."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from cuca import (
    MemoryStore,
    ProviderEndpoint,
    RateLimiter,
    RateLimitError,
    RateLimitExceeded,
    StoreError,
    UnifiedRequest,
    UnifiedResponse,
)
from cuca.admission import estimate_tokens
from cuca.plugins import TurnOutcome
from cuca.turn import AttemptHead, RateLimitHint
from cuca.types import TokenUsage

REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("x" * 400).set_max_tokens(64)
ENDED = TurnOutcome("cancelled")


class Recording(MemoryStore):
    """A store that answers after a checkpoint (as SQLite's worker thread and Redis's
    socket do: a cancelled caller is cancelled there), counts its updates, keeps the
    expiry asked of each, and fails while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.updates = 0
        self.ttls: list[float | None] = []
        self.down = False

    def fails(self, result: Any) -> bool:
        """Whether an update that would answer ``result`` fails while ``down``: all."""
        return True

    async def update(self, key: str, change: Any, ttl: float | None = None) -> Any:
        await trio.lowlevel.checkpoint()
        if self.down and self.fails(change(self._read(key))[1]):  # changes are pure
            raise StoreError("redis redis://127.0.0.1:1/0: ConnectionError: refused")
        self.updates += 1
        self.ttls.append(ttl)
        return await super().update(key, change, ttl)


def limiter(**options: Any) -> RateLimiter:
    """A limiter on trio's clock (the mock clock in these tests)."""
    return RateLimiter(clock=trio.current_time, **options)


async def leases(limiter: RateLimiter) -> int:
    state = await limiter.store.get(limiter.key) or {}
    return len(state.get("l", {}))


def answered(prompt: int, completion: int) -> TurnOutcome:
    usage = TokenUsage(prompt_tokens=prompt, completion_tokens=completion)
    return TurnOutcome("ok", UnifiedResponse(ProviderEndpoint.OPENAI, "gpt-4o", usage=usage))


def refused(retry_after: float) -> TurnOutcome:
    return TurnOutcome("error", error=RateLimitError(429, "", retry_after=retry_after))


async def refusal(limiter: RateLimiter, request: UnifiedRequest = REQUEST) -> RateLimitExceeded:
    with pytest.raises(RateLimitExceeded) as caught:
        await limiter.admit(request)
    return caught.value


def test_rate_limiter_repr_names_its_limits() -> None:
    shown = repr(RateLimiter(requests_per_minute=600, output_tokens_per_minute=1000))
    assert shown.startswith(
        "RateLimiter(requests_per_minute=600, output_tokens_per_minute=1000, "
        "max_concurrent=None, store=MemoryStore("
    )


async def test_rate_limiter_state_expires_in_the_store(mock_clock: MockClock) -> None:
    """The limiter's state is written with an expiry (a store shared for months keeps
    no dead limiter's key), never shorter than a slot may be held (``lease_ttl``)."""
    store = Recording()
    shared = limiter(requests_per_minute=60, lease_ttl=3000.0, store=store)
    await shared.admit(REQUEST)
    assert store.ttls and all(t is not None and t >= 2 * 3000.0 for t in store.ttls)


async def test_rate_limiter_a_turn_that_need_not_wait_is_one_store_update(
    mock_clock: MockClock,
) -> None:
    """The common case costs one round trip to the store: a turn admitted at once, with
    or without a ``max_concurrent`` slot to take, is one update."""
    for options in ({"requests_per_minute": 60}, {"requests_per_minute": 60, "max_concurrent": 2}):
        store = Recording()
        await limiter(store=store, **options).admit(REQUEST)
        assert store.updates == 1, options


async def test_rate_limiter_charges_the_count_it_is_given(mock_clock: MockClock) -> None:
    """With ``input_tokens_per_minute``, a turn is charged the client's count of its
    prompt (1,200 tokens against 600 a minute: a 60 s wait, refused at
    ``max_wait=0``), with or without a ``max_concurrent`` slot; ``count_tokens=False``
    charges the text-length estimate instead (100 tokens: admitted)."""

    async def count(request: UnifiedRequest) -> int:
        return 1200

    for options in ({}, {"max_concurrent": 2}):
        strict = limiter(input_tokens_per_minute=600, max_wait=0, **options)
        with pytest.raises(RateLimitExceeded) as caught:
            await strict.admit(REQUEST, count)
        assert caught.value.limit == "input_tokens_per_minute"
        assert caught.value.wait == pytest.approx(60.0)
    estimating = limiter(input_tokens_per_minute=600, max_wait=0, count_tokens=False)
    assert estimate_tokens(REQUEST) == 100
    await estimating.admit(REQUEST, count)


async def test_rate_limiter_corrects_the_count_by_the_usage(mock_clock: MockClock) -> None:
    """A turn admitted with a ``max_concurrent`` slot is corrected by its exact usage
    too: charged 100 (its estimate), it used 700, so the next turn of 100 makes 800
    against the minute's 600 (10 a second): it waits 20 s (refused at ``max_wait=0``,
    with the wait)."""
    strict = limiter(input_tokens_per_minute=600, max_concurrent=2, max_wait=0,
                     count_tokens=False)
    ticket = await strict.admit(REQUEST)
    await ticket.settle(answered(700, 10))
    error = await refusal(strict)
    assert error.limit == "input_tokens_per_minute"
    assert error.wait == pytest.approx(20.0)


def pacing(limit: str, remaining: int, reset: float) -> RateLimitHint:
    return RateLimitHint(None, {limit: remaining}, {limit: reset})


async def test_rate_limiter_a_turn_costs_its_prompt_on_the_servers_input_tokens(
    autojump_clock: MockClock,
) -> None:
    """The server says 1,000 input tokens remain until a reset in 10 s (a token each
    0.01 s): a turn of a 100-token prompt (its text-length estimate, without an input
    limit of our own; the client's count of 500 with one) holds the next for its own
    tokens' time, 1 s (5 s)."""

    async def count(request: UnifiedRequest) -> int:
        return 500

    for options, seconds in (({}, 1.0), ({"input_tokens_per_minute": 1e9}, 5.0)):
        paced = limiter(**options)
        await paced.steer(pacing("input-tokens", 1000, 10.0))
        await paced.admit(REQUEST, count)
        start = trio.current_time()
        await paced.admit(REQUEST, count)
        assert trio.current_time() - start == pytest.approx(seconds), options


async def test_rate_limiter_with_max_concurrent_still_paced_by_the_server(
    autojump_clock: MockClock,
) -> None:
    """A turn admitted with a slot at once takes its place in the server's pacing
    too: 4 requests remain until a reset in 8 s, the second turn goes 2 s after."""
    paced = limiter(max_concurrent=4)
    await paced.steer(pacing("requests", 4, 8.0))
    await paced.admit(REQUEST)
    start = trio.current_time()
    await paced.admit(REQUEST)
    assert trio.current_time() - start == pytest.approx(2.0)


async def test_rate_limiter_resend_takes_a_requests_place_within_max_wait(
    autojump_clock: MockClock,
) -> None:
    """A resend (the client's retry) takes one request's place: at 60 a minute, one
    turn, its resend 1 s later, the next turn 1 s after that; it waits within
    ``max_wait`` (1.5 s here: its 1 s is allowed)."""
    for options in ({}, {"max_concurrent": 2}):
        steady = limiter(requests_per_minute=60, max_wait=1.5, **options)
        start = trio.current_time()
        ticket = await steady.admit(REQUEST)
        await ticket.on_resend()
        assert trio.current_time() - start == pytest.approx(1.0)
        await steady.admit(REQUEST)
        assert trio.current_time() - start == pytest.approx(2.0)


async def test_rate_limiter_resend_takes_its_place_in_the_servers_pacing(
    autojump_clock: MockClock,
) -> None:
    """The server counts a resend: 4 requests remain until a reset in 8 s (2 s apart);
    a turn, its resend, and the next turn go 2 s apart each."""
    for options in ({}, {"max_concurrent": 2}):
        paced = limiter(**options)
        await paced.steer(pacing("requests", 4, 8.0))
        start = trio.current_time()
        ticket = await paced.admit(REQUEST)
        await ticket.on_resend()
        await paced.admit(REQUEST)
        assert trio.current_time() - start == pytest.approx(4.0), options


async def test_rate_limiter_store_down_fails_the_turn_unless_fail_open(
    mock_clock: MockClock,
) -> None:
    """A store that fails ends the turn with ``StoreError`` (admission, the turn's end,
    the server's headers, a resend); ``fail_open=True`` lets the turn go on instead."""
    head = AttemptHead(200, (), RateLimitHint(2.0))
    for options in ({}, {"max_concurrent": 2}):
        store = Recording()
        strict = limiter(requests_per_minute=60, output_tokens_per_minute=1000, store=store,
                         **options)
        ticket = await strict.admit(REQUEST)
        store.down = True
        with pytest.raises(StoreError):
            await strict.admit(REQUEST)
        with pytest.raises(StoreError):
            await ticket.on_head(head)
        with pytest.raises(StoreError):
            await ticket.on_resend()
        with pytest.raises(StoreError):
            await ticket.settle(answered(10, 10))

        store = Recording()
        lenient = limiter(requests_per_minute=60, output_tokens_per_minute=1000, store=store,
                          fail_open=True, **options)
        ticket = await lenient.admit(REQUEST)
        store.down = True
        await lenient.admit(REQUEST)
        await ticket.on_head(head)
        await ticket.on_resend()
        await ticket.settle(answered(10, 10))


async def test_rate_limiter_fail_open_turn_ends_quietly_when_its_slot_cannot_go_back(
    mock_clock: MockClock,
) -> None:
    """A turn admitted without the store (``fail_open``) after it took a slot ends
    without an error even when the store is still down: the slot expires after
    ``lease_ttl``."""

    class SlotsOnly(Recording):
        """Down, after its first update, for all but the slots taken."""

        def fails(self, result: Any) -> bool:
            return not isinstance(result, bool)

        async def update(self, key: str, change: Any, ttl: float | None = None) -> Any:
            if self.updates >= 1:
                self.down = True
            return await super().update(key, change, ttl)

    lenient = limiter(requests_per_minute=1, max_concurrent=2, fail_open=True,
                      store=SlotsOnly())
    await lenient.admit(REQUEST)
    ticket = await lenient.admit(REQUEST)  # would wait: a slot, then the store fails
    assert await leases(lenient) == 2
    await ticket.settle(ENDED)  # its slot cannot go back: no error


async def test_rate_limiter_refusals_name_the_limit_and_the_wait(
    autojump_clock: MockClock,
) -> None:
    """``max_waiters``: the refusal names it and the wait the limit would have made
    (1.00 s); past ``max_wait`` it names the limit and the wait (10.00 s); a turn
    refused before its wait for a slot is known says so."""
    queued = limiter(requests_per_minute=60, max_waiters=1)
    await queued.admit(REQUEST)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queued.admit, REQUEST)
        await trio.sleep(0.25)
        error = await refusal(queued)
        assert (error.limit, error.wait) == ("max_waiters", pytest.approx(1.75))
        assert str(error).endswith(
            "1 turns are already waiting (max_waiters=1); requests_per_minute would have "
            "made this one wait 1.75 s"
        )
        nursery.cancel_scope.cancel()

    slow = limiter(requests_per_minute=6, max_wait=1.0)
    await slow.admit(REQUEST)
    error = await refusal(slow)
    assert str(error).endswith("requests_per_minute: the wait would be 10.00 s, past "
                               "max_wait=1.0 s")

    one = limiter(max_concurrent=1, max_waiters=0)
    await one.admit(REQUEST)
    error = await refusal(one)
    assert (error.limit, error.wait) == ("max_waiters", None)
    assert str(error).endswith("0 turns are already waiting (max_waiters=0); max_concurrent "
                               "would have made this one wait an unknown time")


async def test_rate_limiter_max_wait_bounds_the_wait_for_a_slot(
    autojump_clock: MockClock,
) -> None:
    """One turn in flight (``max_concurrent=1``) for ever: the next waits for its slot
    ``max_wait`` (1 s) and is refused, naming ``max_concurrent``."""
    one = limiter(max_concurrent=1, max_wait=1.0)
    await one.admit(REQUEST)
    start = trio.current_time()
    error = await refusal(one)
    assert trio.current_time() - start == pytest.approx(1.0)
    assert (error.limit, error.wait) == ("max_concurrent", None)
    assert str(error).endswith("max_concurrent=1 turns stayed in flight for max_wait=1.0 s")


async def test_rate_limiter_slot_goes_to_the_waiter_as_the_turn_ends(
    autojump_clock: MockClock,
) -> None:
    """A turn waiting for a ``max_concurrent`` slot gets it the moment the turn in it
    ends (not at its next look at other processes' slots)."""
    one = limiter(max_concurrent=1)
    first = await one.admit(REQUEST)
    admitted: list[float] = []

    async def second() -> None:
        await one.admit(REQUEST)
        admitted.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.sleep(1.01)
        ended = trio.current_time()
        await first.settle(answered(1, 1))
    assert admitted == [pytest.approx(ended, abs=1e-9)]


async def test_rate_limiter_cancelled_waiter_gives_its_place_and_slot_back(
    autojump_clock: MockClock,
) -> None:
    """A turn cancelled while it waits gives back its place in the rate, in the server's
    pacing and its ``max_concurrent`` slot, through a store that answers after a
    checkpoint (the give-back is shielded from the cancellation)."""
    store = Recording()
    shared = limiter(requests_per_minute=60, max_concurrent=4, store=store)
    await shared.steer(pacing("requests", 4, 8.0))  # 2 s apart
    await shared.admit(REQUEST)
    with trio.move_on_after(0.5):
        await shared.admit(REQUEST)  # would wait 2 s
    assert await leases(shared) == 1
    start = trio.current_time()
    await shared.admit(REQUEST)  # the cancelled turn's place
    assert trio.current_time() - start == pytest.approx(1.5)


async def admitted_at(shared: RateLimiter, turns: int, start: float) -> list[float]:
    """When each of ``turns`` turns, admitted one after another, got through (seconds
    after ``start``, on trio's clock)."""
    went = []
    for _ in range(turns):
        await shared.admit(REQUEST)
        went.append(trio.current_time() - start)
    return went


async def test_rate_limiter_retry_after_pauses_every_turn_and_keeps_the_rest(
    autojump_clock: MockClock,
) -> None:
    """A turn ended by a 429 with ``Retry-After: 10`` pauses every turn of the limiter
    10 s; after it, turns go one interval apart (60 a minute, burst 3: at 10, 11 and
    12 s, not three at once); the other turn's ``max_concurrent`` slot stays taken."""
    shared = limiter(requests_per_minute=60, burst=3, max_concurrent=4)
    other = await shared.admit(REQUEST)
    ticket = await shared.admit(REQUEST)
    start = trio.current_time()
    await ticket.settle(refused(10.0))
    assert await leases(shared) == 1
    assert await admitted_at(shared, 3, start) == pytest.approx([10.0, 11.0, 12.0])
    await other.settle(ENDED)


async def test_rate_limiter_headers_pause_every_turn_and_keep_the_rest(
    autojump_clock: MockClock,
) -> None:
    """The server's headers asking for a 10 s pause hold every turn of the limiter
    10 s, then spaced as usual (burst 3: at 10, 11, 12 s); the slots taken stay
    taken."""
    shared = limiter(requests_per_minute=60, burst=3, max_concurrent=4)
    ticket = await shared.admit(REQUEST)
    start = trio.current_time()
    await ticket.on_head(AttemptHead(200, (), RateLimitHint(10.0)))
    assert await leases(shared) == 1
    assert await admitted_at(shared, 3, start) == pytest.approx([10.0, 11.0, 12.0])


async def test_rate_limiter_one_request_left_waits_for_the_reset(
    autojump_clock: MockClock,
) -> None:
    """1 request left and 6 s to the reset, the whole limit not said: the next turn
    waits the 6 s (docs/limits.md: ``t / n`` is the safe choice for any window)."""
    paced = limiter()
    await paced.steer(pacing("requests", 1, 6.0))
    await paced.admit(REQUEST)
    start = trio.current_time()
    await paced.admit(REQUEST)
    assert trio.current_time() - start == pytest.approx(6.0)


async def test_rate_limiter_ticket_settles_once(mock_clock: MockClock) -> None:
    """A ticket settled twice (the turn's end told again) charges its usage once."""
    strict = limiter(output_tokens_per_minute=60, max_wait=0)
    ticket = await strict.admit(REQUEST)
    await ticket.settle(answered(1, 90))
    await ticket.settle(answered(1, 90))
    error = await refusal(strict)
    assert error.wait == pytest.approx(30.0)  # 90 of 60 a minute, not 180


async def test_rate_limiter_defaults_as_documented(mock_clock: MockClock) -> None:
    """The state lives under ``"cuca:ratelimit"``; a ``max_concurrent`` slot of a turn
    that never ends (its process died) is free again after ``lease_ttl``, 600 s, not
    before."""
    store = MemoryStore()
    one = RateLimiter(max_concurrent=1, max_wait=0, store=store, clock=trio.current_time)
    await one.admit(REQUEST)
    assert await store.get("cuca:ratelimit") is not None
    mock_clock.jump(599.5)
    assert (await refusal(one)).limit == "max_concurrent"
    mock_clock.jump(1.0)
    await one.admit(REQUEST)


def test_rate_limiter_refuses_bad_settings_naming_them() -> None:
    """Each setting out of its range is a ``ConfigurationError`` that names it: a rate
    must be a positive number (not a bool, not a string), a count an integer >= 0 (0
    is one)."""
    from cuca import ConfigurationError

    for name in ("requests_per_minute", "input_tokens_per_minute", "output_tokens_per_minute"):
        for bad in (0, -1, True, "60"):
            positive = f"error: {name} must be a positive number"
            with pytest.raises(ConfigurationError, match=positive):
                RateLimiter(**{name: bad})
    for name in ("max_concurrent", "max_waiters"):
        for bad in (-1, 1.5, "2"):
            with pytest.raises(ConfigurationError, match=f"error: {name} must be an integer >= 0"):
                RateLimiter(**{name: bad})
        RateLimiter(**{name: 0})
    for bad in (0, 1.5, "2"):
        with pytest.raises(ConfigurationError, match="error: burst must be an integer >= 1"):
            RateLimiter(burst=bad)  # type: ignore[arg-type]
    for bad in (-1, "1"):
        with pytest.raises(ConfigurationError, match="error: max_wait must be seconds >= 0"):
            RateLimiter(max_wait=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"store must be a cuca store, not .*\(object\)"):
        RateLimiter(store=object())  # type: ignore[arg-type]


async def test_rate_limiter_turn_admitted_without_the_store_only_gives_its_slot_back(
    autojump_clock: MockClock,
) -> None:
    """A turn ``fail_open`` admitted while the store was down reserved nothing, so it
    charges nothing when it ends, even with the store back (its usage, 6,000 output
    tokens, would hold the next turn 6,000 s): only its slot goes back."""

    class Down(Recording):
        """Down for every update (``"lease"``) or for the reservations only."""

        def __init__(self, failing: str) -> None:
            super().__init__()
            self.failing = failing

        def fails(self, result: Any) -> bool:
            return self.failing == "lease" or not isinstance(result, bool)

    for failing in ("lease", "reservation"):
        store = Down(failing)
        lenient = limiter(requests_per_minute=1, output_tokens_per_minute=60,
                          max_concurrent=2, max_wait=0, fail_open=True, store=store)
        ticket = await lenient.admit(REQUEST)
        await ticket.settle(ENDED)
        store.down = True
        ticket = await lenient.admit(REQUEST)  # rate-held: admitted without the store
        store.down = False
        await ticket.on_head(AttemptHead(200, (), RateLimitHint(100.0)))
        await ticket.settle(answered(10, 6000))
        assert await leases(lenient) == 0, failing
        autojump_clock.jump(60.0)
        await lenient.admit(REQUEST)  # a minute later: the rate's next place, no more


async def test_rate_limiter_store_failing_on_the_reservation_gives_the_slot_back(
    mock_clock: MockClock,
) -> None:
    """The store fails between a turn's slot and its place in the rate: the turn ends
    with ``StoreError`` and its ``max_concurrent`` slot goes back."""

    class FailsOnReservations(Recording):
        def fails(self, result: Any) -> bool:
            return not isinstance(result, bool | None)

    store = FailsOnReservations()
    strict = limiter(requests_per_minute=1, max_concurrent=2, store=store)
    await strict.admit(REQUEST)
    store.down = True
    with pytest.raises(StoreError):
        await strict.admit(REQUEST)
    assert await leases(strict) == 1


async def test_rate_limiter_a_turn_costs_prompt_and_max_tokens_on_the_servers_tokens(
    autojump_clock: MockClock,
) -> None:
    """On the server's ``tokens`` limit a turn costs its prompt plus its ``max_tokens``
    (as OpenAI counts it), its prompt alone without one: 1,000 tokens remain until a
    reset in 10 s, a turn of 100 + 64 holds the next 1.64 s, one of 100 alone 1 s."""
    for request, seconds in ((REQUEST, 1.64), (REQUEST.set_max_tokens(None), 1.0)):
        paced = limiter()
        await paced.steer(pacing("tokens", 1000, 10.0))
        await paced.admit(request)
        start = trio.current_time()
        await paced.admit(request)
        assert trio.current_time() - start == pytest.approx(seconds)


async def test_rate_limiter_a_hung_store_holds_a_cancelled_turn_5_s_per_give_back(
    autojump_clock: MockClock,
) -> None:
    """A turn cancelled while it waits gives back its place, then its slot, each in a
    store update shielded from the cancellation but bounded: a store that hangs holds
    the cancelled turn 5 s for each (never a hang), the place and the slot then expire
    with the state."""

    class Hangs(Recording):
        async def update(self, key: str, change: Any, ttl: float | None = None) -> Any:
            if self.down:
                await trio.sleep_forever()
            return await super().update(key, change, ttl)

    store = Hangs()
    shared = limiter(requests_per_minute=60, max_concurrent=4, store=store)
    await shared.admit(REQUEST)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(shared.admit, REQUEST)  # waits 1 s
        await trio.sleep(0.5)
        store.down = True
        nursery.cancel_scope.cancel()
    assert trio.current_time() - start == pytest.approx(10.5)


async def test_rate_limiter_retry_after_pauses_a_limiter_of_requests_alone(
    autojump_clock: MockClock,
) -> None:
    """A limiter of requests alone (nothing charged at a turn's end, no slot): a turn
    ended by a 429 with ``Retry-After: 10`` still pauses the next turn 10 s; a turn that
    ends without one costs no store update at all."""
    store = Recording()
    plain = limiter(requests_per_minute=600, store=store)
    ticket = await plain.admit(REQUEST)
    await ticket.settle(ENDED)
    assert store.updates == 1  # the admission's only
    ticket = await plain.admit(REQUEST)
    start = trio.current_time()
    await ticket.settle(refused(10.0))
    await plain.admit(REQUEST)
    assert trio.current_time() - start == pytest.approx(10.0)
