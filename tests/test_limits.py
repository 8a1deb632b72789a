"""RateLimiter: spacing, tokens, concurrency, refusals, the server's steering, and that a
turn's permit comes back however the turn ends (over loopback)."""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from support.transcripts import transcript
from trio.testing import MockClock

from cuca import (
    CucaClient,
    FallbackClient,
    MemoryStore,
    ProviderEndpoint,
    RateLimiter,
    RateLimitError,
    RateLimitExceeded,
    RetryPolicy,
    UnifiedRequest,
)
from cuca.admission import estimate_tokens
from cuca.limits import window
from cuca.providers.ratelimit import parse_duration, rate_limit_hint
from cuca.testing import Reply, open_replay_server

OPENAI = ProviderEndpoint.OPENAI
REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64)
TEXT = Reply(transcript("openai/text"))  # usage: 1117 prompt, 46 completion tokens
SLOW = Reply(transcript("openai/text"), chunks=(64,) * 20, delay=0.01)


def client(url: str, limiter: RateLimiter, **options: Any) -> CucaClient:
    return CucaClient(OPENAI, base_url=f"{url}/v1", api_key="k", rate_limiter=limiter, **options)


async def lease_count(limiter: RateLimiter) -> int:
    state = await limiter.store.get(limiter.key) or {}
    return len(state.get("l", {}))


async def test_rate_limiter_spaces_requests_at_the_rate() -> None:
    limiter = RateLimiter(requests_per_minute=600)  # one every 0.1 s
    async with open_replay_server(TEXT) as server, client(server.url, limiter) as c:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(c.generate, REQUEST)
        took = trio.current_time() - start
    assert len(server.requests) == 5
    assert took >= 0.4, f"5 turns at 600/min took {took:.3f} s, less than 0.4 s"


async def test_rate_limiter_admits_in_order_one_slot_apart(autojump_clock: MockClock) -> None:
    limiter = RateLimiter(requests_per_minute=60, clock=trio.current_time)
    admitted: list[tuple[int, float]] = []
    start = trio.current_time()

    async def turn(n: int) -> None:
        await limiter.admit(REQUEST)
        admitted.append((n, trio.current_time() - start))

    async with trio.open_nursery() as nursery:
        for n in range(4):
            nursery.start_soon(turn, n)
            await trio.sleep(0)  # asked in this order
    assert [n for n, _ in admitted] == [0, 1, 2, 3]
    assert [round(t, 3) for _, t in admitted] == [0.0, 1.0, 2.0, 3.0]


async def test_rate_limiter_cancelled_waiter_leaves_the_queue(autojump_clock: MockClock) -> None:
    limiter = RateLimiter(requests_per_minute=60, clock=trio.current_time)  # one a second
    await limiter.admit(REQUEST)
    with trio.move_on_after(0.1):
        await limiter.admit(REQUEST)  # would wait 1 s: cancelled after 0.1 s
    assert limiter.waiting == 0
    start = trio.current_time()
    await limiter.admit(REQUEST)  # the cancelled waiter's slot is free again
    assert trio.current_time() - start == pytest.approx(0.9)


async def test_rate_limiter_max_wait_refuses_with_the_limit_and_the_wait(
    mock_clock: MockClock,
) -> None:
    # trio's clock stands still: the second turn asks at the very moment of the first,
    # so it would wait the whole 10 s, however slow the machine
    limiter = RateLimiter(requests_per_minute=6, max_wait=1.0, clock=trio.current_time)
    await limiter.admit(REQUEST)  # one per 10 s
    with pytest.raises(RateLimitExceeded) as caught:
        await limiter.admit(REQUEST)
    error = caught.value
    assert error.limit == "requests_per_minute"
    assert error.wait == pytest.approx(10.0, abs=1e-9)
    assert "past max_wait=1.0 s" in str(error)


async def test_rate_limiter_max_wait_zero_names_the_rate_not_a_free_slot(
    mock_clock: MockClock,
) -> None:
    """max_concurrent=4 with one turn in flight: a slot is free, the rate is what holds
    the second turn; the refusal says so (it said 'max_concurrent=4 turns stayed in
    flight'). Trio's clock stands still: the wait is the whole minute."""
    limiter = RateLimiter(requests_per_minute=1, max_concurrent=4, max_wait=0,
                          clock=trio.current_time)
    await limiter.admit(REQUEST)
    with pytest.raises(RateLimitExceeded) as caught:
        await limiter.admit(REQUEST)
    assert caught.value.limit == "requests_per_minute"
    assert caught.value.wait == pytest.approx(60.0, abs=1e-9)
    assert await lease_count(limiter) == 1  # the refused turn's slot went back


async def test_rate_limiter_max_wait_bounds_the_whole_wait(autojump_clock: MockClock) -> None:
    """A turn that waited 1.4 s for a concurrency slot, then would wait 0.6 s more for
    the rate, waits 2 s in all: past max_wait=1.5, it is refused (it was admitted
    after 2 s)."""
    from cuca.plugins import TurnOutcome

    limiter = RateLimiter(requests_per_minute=30, max_concurrent=1, max_wait=1.5,
                          clock=trio.current_time)
    first = await limiter.admit(REQUEST)
    start = trio.current_time()

    async def end_first() -> None:
        await trio.sleep(1.4)
        await first.settle(TurnOutcome("cancelled"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(end_first)
        with pytest.raises(RateLimitExceeded) as caught:
            await limiter.admit(REQUEST)
    waited = trio.current_time() - start
    assert waited <= 1.5, f"the turn waited {waited:.2f} s with max_wait=1.5"
    assert caught.value.limit == "requests_per_minute"
    assert caught.value.wait == pytest.approx(2.0, abs=0.06)
    assert await lease_count(limiter) == 0


async def test_rate_limiter_max_waiters_refuses_the_next_waiter(
    autojump_clock: MockClock,
) -> None:
    limiter = RateLimiter(requests_per_minute=60, max_waiters=1, clock=trio.current_time)
    await limiter.admit(REQUEST)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(limiter.admit, REQUEST)  # waits 1 s (of the mock clock)
        await trio.sleep(0.05)
        with pytest.raises(RateLimitExceeded, match="1 turns are already waiting") as caught:
            await limiter.admit(REQUEST)
        assert caught.value.limit == "max_waiters"
        nursery.cancel_scope.cancel()


async def test_rate_limiter_max_waiters_counts_turns_waiting_for_a_slot(
    autojump_clock: MockClock,
) -> None:
    """One turn in flight (max_concurrent=1), one waiting for its slot (max_waiters=1):
    a third is refused at once (it waited, unbounded, behind the second)."""
    limiter = RateLimiter(max_concurrent=1, max_waiters=1, clock=trio.current_time)
    await limiter.admit(REQUEST)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(limiter.admit, REQUEST)
        await trio.sleep(0.2)
        assert limiter.waiting == 1
        with trio.fail_after(1), pytest.raises(RateLimitExceeded) as caught:
            await limiter.admit(REQUEST)
        assert caught.value.limit == "max_waiters"
        assert "1 turns are already waiting" in str(caught.value)
        assert limiter.waiting == 1
        nursery.cancel_scope.cancel()
    assert limiter.waiting == 0


async def test_rate_limiter_max_concurrent_holds_until_the_turn_ends() -> None:
    limiter = RateLimiter(max_concurrent=1)
    async with open_replay_server(SLOW) as server, client(server.url, limiter) as c:
        in_flight, most = 0, 0

        async def turn() -> None:
            nonlocal in_flight, most
            async with c.generate_stream(REQUEST) as stream:
                streaming = False
                async for _ in stream:  # a first block: the turn was admitted and sent
                    if not streaming:
                        streaming, in_flight = True, in_flight + 1
                        most = max(most, in_flight)
                    await trio.sleep(0)
                in_flight -= 1

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(turn)
    assert len(server.requests) == 3
    assert most == 1, f"{most} turns streamed at once with max_concurrent=1"
    assert await lease_count(limiter) == 0


async def test_rate_limiter_dropped_streams_never_leak_a_slot() -> None:
    limiter = RateLimiter(max_concurrent=1, max_wait=2.0)
    rng = random.Random(25)
    async with open_replay_server(SLOW) as server, client(server.url, limiter) as c:
        for _ in range(12):
            stop_after = rng.randrange(0, 8)
            how = rng.choice(["break", "cancel", "error"])
            try:
                with trio.CancelScope() as scope:
                    async with c.generate_stream(REQUEST) as stream:
                        seen = 0
                        async for _ in stream:
                            seen += 1
                            if seen > stop_after:
                                if how == "cancel":
                                    scope.cancel()
                                    await trio.sleep(0)
                                if how == "error":
                                    raise KeyError("the consumer failed")
                                break
            except KeyError:
                pass
            assert await lease_count(limiter) == 0, f"a slot leaked after {how} at {seen}"
        # a slot still free: a whole turn gets through within max_wait
        await c.generate(REQUEST)


async def test_rate_limiter_turns_cancelled_at_random_times_never_leak() -> None:
    """Turns cancelled at any point of their life: waiting for a slot, waiting for the
    rate, while the request goes out, mid-stream, or after the end. None keeps a slot,
    none stays counted as waiting, and whole turns get through afterwards."""
    limiter = RateLimiter(requests_per_minute=1200, max_concurrent=2, max_wait=5.0)
    rng = random.Random(2525)
    async with open_replay_server(SLOW) as server, client(server.url, limiter) as c:
        for _ in range(4):
            async def turn(after: float) -> None:
                with trio.move_on_after(after):
                    async with c.generate_stream(REQUEST) as stream:
                        async for _ in stream:
                            pass

            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(turn, rng.uniform(0.0, 0.5))
            assert await lease_count(limiter) == 0, "a cancelled turn kept its slot"
            assert limiter.waiting == 0
        with trio.fail_after(60):  # a guard against a hang, not a measure
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(c.generate, REQUEST)
    assert await lease_count(limiter) == 0


class FailsOnReservations(MemoryStore):
    """A store that fails on the limiter's reservations (its slots still work): the
    store went down between a turn's slot and its place in the rate."""

    async def update(self, key: str, change: Any, ttl: float | None = None) -> Any:
        from cuca import StoreError

        new, result = change(self._read(key))
        if isinstance(result, window.Reservation):
            raise StoreError("redis redis://127.0.0.1:1/0: ConnectionError: refused")
        self._write(key, new, ttl)
        return result


async def test_rate_limiter_fail_open_turn_gives_its_slot_back() -> None:
    """fail_open admits a turn whose reservation the store failed; the slot it had
    already taken comes back when it ends (it was kept for lease_ttl, 600 s)."""
    from cuca.plugins import TurnOutcome

    limiter = RateLimiter(requests_per_minute=60, max_concurrent=2, fail_open=True,
                          store=FailsOnReservations())
    first = await limiter.admit(REQUEST)
    second = await limiter.admit(REQUEST)  # a slot, then the store fails: admitted
    assert await lease_count(limiter) == 2
    for ticket in (first, second):
        await ticket.settle(TurnOutcome("cancelled"))
    assert await lease_count(limiter) == 0, "the fail_open turn kept its slot"


async def test_rate_limiter_charges_exact_output_tokens(mock_clock: MockClock) -> None:
    """46 completion tokens against 30 a minute: they drain in 92 s, a minute's worth
    may be outstanding, so the next turn would wait 32 s (refused: max_wait=0). Before
    the first turn's usage came back, nothing was owed."""
    # clocks that stand still: no drain between the two turns, and no time spent on the
    # second turn's admission (the refusal names the wait plus what admission took),
    # however slow the machine
    limiter = RateLimiter(output_tokens_per_minute=30, max_wait=0, clock=lambda: 1000.0)
    async with open_replay_server(TEXT) as server, client(server.url, limiter) as c:
        await c.generate(REQUEST)
        with pytest.raises(RateLimitExceeded) as caught:
            await c.generate(REQUEST)
    assert caught.value.limit == "output_tokens_per_minute"
    assert caught.value.wait == pytest.approx(32.0, abs=1e-6)
    assert len(server.requests) == 1


async def test_rate_limiter_input_estimate_is_corrected_by_usage() -> None:
    # a clock that stands still: the bucket holds exactly what was charged
    limiter = RateLimiter(input_tokens_per_minute=1_000_000, count_tokens=False,
                          clock=lambda: 1000.0)
    assert estimate_tokens(REQUEST) == 2  # "Hello?" is 6 characters: ceil(6 / 4)
    async with open_replay_server(TEXT) as server, client(server.url, limiter) as c:
        await c.generate(REQUEST)
    state = await limiter.store.get(limiter.key)
    interval = 60 / 1_000_000
    charged = (state["b"]["input_tokens_per_minute"] - 1000.0) / interval
    assert charged == pytest.approx(1117, abs=0.01)  # the exact 1117, not the estimate 2


async def test_rate_limiter_paused_by_openai_headers_for_every_sharer() -> None:
    headers = [
        ("content-type", "text/event-stream"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "600ms"),
        ("x-ratelimit-remaining-tokens", "5000"),
    ]
    limiter = RateLimiter(requests_per_minute=6000)
    arrivals = Arrivals([Reply(transcript("openai/text"), headers=headers), TEXT])
    async with open_replay_server(arrivals) as server:
        async with client(server.url, limiter) as a, client(server.url, limiter) as b:
            await a.generate(REQUEST)
            await b.generate(REQUEST)  # another client, same limiter: paused
    # the pause runs from the answer's headers, which came after the first request
    # arrived: however slow the machine, the second arrives 600 ms after the first
    first, second = arrivals.times
    assert second - first >= 0.6, f"the second turn arrived {second - first:.3f} s later"


async def test_rate_limiter_paused_by_anthropic_headers() -> None:
    import datetime

    limiter = RateLimiter()
    request = UnifiedRequest.new("claude-sonnet-4-5").add_user_message("Hi").set_max_tokens(64)
    answer = transcript("anthropic/text")
    arrived: list[float] = []  # wall-clock times, as the reset header is one
    resets: list[float] = []

    def replies(recorded: Any) -> Reply:
        arrived.append(time.time())
        if len(arrived) > 1:
            return Reply(answer)
        # the reset is named as the first answer goes out, so however long the client took
        # to start, the pause is still 1.5 s ahead when it reads the headers
        reset = datetime.datetime.fromtimestamp(arrived[0] + 1.5, datetime.UTC)
        resets.append(reset.timestamp())
        headers = [
            ("content-type", "text/event-stream"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", reset.isoformat().replace("+00:00", "Z")),
        ]
        return Reply(answer, headers=headers)

    async with open_replay_server(replies) as server:
        async with CucaClient(
            ProviderEndpoint.ANTHROPIC, base_url=server.url, api_key="k", rate_limiter=limiter
        ) as c:
            await c.generate(request)
            await c.generate(request)
    # the second request waited for the reset the first answer named, not a fixed time
    # after it (a slow first turn would eat into that)
    early = resets[0] - arrived[1]  # (a millisecond for the two clocks' drift)
    assert early <= 1e-3, f"the second request arrived {early:.3f} s before the reset"


async def test_rate_limiter_paused_by_a_429_retry_after() -> None:
    limiter = RateLimiter()
    refused = Reply(b'{"error": {"message": "slow down"}}', status=429,
                    headers=[("retry-after", "1"), ("content-type", "application/json")])
    arrivals = Arrivals([refused, TEXT])
    async with open_replay_server(arrivals) as server:
        async with client(server.url, limiter, retry=RetryPolicy.never()) as c:
            with pytest.raises(RateLimitError):
                await c.generate(REQUEST)
            await c.generate(REQUEST)
    refused_at, next_at = arrivals.times  # the pause runs from the 429, read after this
    assert next_at - refused_at >= 1.0, f"the next turn arrived {next_at - refused_at:.3f} s on"


class Arrivals:
    """A loopback server's answers in order, with the (trio) time each request arrived."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.times: list[float] = []

    def __call__(self, request: Any) -> Reply:
        self.times.append(trio.current_time())
        return self.replies[min(len(self.times), len(self.replies)) - 1]


async def paused_until(limiter: RateLimiter) -> float:
    state = await limiter.store.get(limiter.key) or {}
    return float(state.get("p", 0.0))


async def test_rate_limiter_hears_a_429_the_retry_absorbed(autojump_clock: MockClock) -> None:
    """Attempt 1 is a 429 with Retry-After: 1, attempt 2 succeeds: the pause holds for a
    second turn sharing the limiter, started during it (it reaches the server only once
    the pause is over), though the first turn never failed."""
    limiter = RateLimiter(clock=trio.current_time)
    refused = Reply(b'{"error": {"message": "slow down"}}', status=429,
                    headers=[("retry-after", "1"), ("content-type", "application/json")])
    server_replies = Arrivals([refused, TEXT, TEXT])
    policy = RetryPolicy(jitter=0)
    async with open_replay_server(server_replies) as server:
        async with client(server.url, limiter, retry=policy) as a, client(server.url, limiter) as b:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(a.generate, REQUEST)
                with trio.move_on_after(0.5):
                    while await paused_until(limiter) == 0:
                        await trio.sleep(0.01)
                pause_end = await paused_until(limiter)
                started = trio.current_time()
                assert started < pause_end, "the second turn must start during the pause"
                nursery.start_soon(b.generate, REQUEST)
    refused_at, *later = server_replies.times
    assert len(server.requests) == 3  # the 429, the resend, the second turn
    assert pause_end == pytest.approx(refused_at + 1.0, abs=0.05)
    assert all(t >= pause_end for t in later), (
        f"a request reached the server at {[t - refused_at for t in later]} s after the "
        "429, before its Retry-After of 1 s was over"
    )


async def test_rate_limiter_holds_the_resend_until_the_servers_reset(
    autojump_clock: MockClock,
) -> None:
    """A 429 without Retry-After but whose headers say no request remains until a reset
    in 2 s: the retry's own backoff is 0.5 s, but the resend waits for the reset."""
    limiter = RateLimiter(clock=trio.current_time)
    refused = Reply(b'{"error": {"message": "slow down"}}', status=429,
                    headers=[("content-type", "application/json"),
                             ("x-ratelimit-remaining-requests", "0"),
                             ("x-ratelimit-reset-requests", "2s")])
    server_replies = Arrivals([refused, TEXT])
    policy = RetryPolicy(initial_delay=0.5, jitter=0)
    async with open_replay_server(server_replies) as server:
        async with client(server.url, limiter, retry=policy) as c:
            await c.generate(REQUEST)
    refused_at, resent_at = server_replies.times
    assert len(server.requests) == 2
    assert resent_at - refused_at >= 2.0, (
        f"the resend went {resent_at - refused_at:.2f} s after the 429, before the reset in 2 s"
    )


async def test_rate_limiter_in_plugins_is_the_one_way_to_attach_it() -> None:
    """``plugins=[limiter]`` admits as ``rate_limiter=limiter`` does: the second turn in
    the same minute is refused and never sent."""
    limiter = RateLimiter(requests_per_minute=1, max_wait=0)
    async with open_replay_server(TEXT) as server:
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", api_key="k",
                              plugins=[limiter]) as c:
            await c.generate(REQUEST)
            with pytest.raises(RateLimitExceeded, match="requests_per_minute"):
                await c.generate(REQUEST)
    assert len(server.requests) == 1


async def test_rate_limiter_refusal_sends_nothing() -> None:
    limiter = RateLimiter(requests_per_minute=1, max_wait=0)
    async with open_replay_server(TEXT) as server, client(server.url, limiter) as c:
        await c.generate(REQUEST)
        with pytest.raises(RateLimitExceeded, match="requests_per_minute"):
            await c.generate(REQUEST)
    assert len(server.requests) == 1


async def test_rate_limiter_in_a_fallback_client_and_a_pool() -> None:
    limiter = RateLimiter(requests_per_minute=600)
    async with open_replay_server(TEXT) as one, open_replay_server(TEXT) as two:
        pooled = CucaClient(OPENAI, base_url=[f"{one.url}/v1", f"{two.url}/v1"], api_key="k",
                            rate_limiter=limiter)
        plain = CucaClient(OPENAI, base_url=f"{one.url}/v1", api_key="k")
        async with pooled, FallbackClient([plain], rate_limiter=limiter) as fallback:
            start = trio.current_time()
            for _ in range(2):
                await pooled.generate(REQUEST)
                await fallback.generate(REQUEST)
            took = trio.current_time() - start
    assert len(one.requests) + len(two.requests) == 4
    assert took >= 0.3, f"4 turns sharing 600/min took {took:.3f} s"


def test_rate_limiter_refuses_bad_settings() -> None:
    from cuca import ConfigurationError

    with pytest.raises(ConfigurationError, match="requests_per_minute must be a positive"):
        RateLimiter(requests_per_minute=0)
    with pytest.raises(ConfigurationError, match="max_wait"):
        RateLimiter(max_wait=-1)
    with pytest.raises(ConfigurationError, match="rate_limiter must be"):
        CucaClient(OPENAI, rate_limiter=object())  # type: ignore[arg-type]


def test_window_reserve_spaces_and_refund_gives_back() -> None:
    bucket = window.Bucket("requests_per_minute", 60, 1)
    state, first = window.reserve(None, 100.0, {bucket: 1}, None)
    assert first.wait == 0
    state, second = window.reserve(state, 100.0, {bucket: 1}, None)
    assert second.wait == pytest.approx(1.0) and second.limit == "requests_per_minute"
    state, _ = window.refund(state, {bucket: 1})
    _, third = window.reserve(state, 100.0, {bucket: 1}, None)
    assert third.wait == pytest.approx(1.0)
    _, refused = window.reserve(state, 100.0, {bucket: 1}, max_wait=0.5)
    assert refused.refused


def test_window_pause_holds_every_turn_until_then() -> None:
    bucket = window.Bucket("requests_per_minute", 60, 1)
    state = window.pause(None, 105.0, bucket)
    _, reservation = window.reserve(state, 100.0, {bucket: 1}, None)
    assert reservation.wait == pytest.approx(5.0)


def test_rate_limit_hint_reads_vendor_headers() -> None:
    assert parse_duration("6m0s") == 360.0
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("20ms") == pytest.approx(0.02)
    assert parse_duration("soon") is None
    hint = rate_limit_hint([("X-RateLimit-Remaining-Tokens", "0"),
                            ("x-ratelimit-reset-tokens", "1.5s"),
                            ("x-ratelimit-remaining-requests", "10")])
    assert hint is not None and hint.pause == 1.5
    assert hint.remaining == {"tokens": 0, "requests": 10}
    hint = rate_limit_hint([("anthropic-ratelimit-output-tokens-remaining", "0"),
                            ("anthropic-ratelimit-output-tokens-reset", "2026-01-01T00:00:10Z")],
                           now=1767225600.0)  # 2026-01-01T00:00:00Z
    assert hint is not None and hint.pause == pytest.approx(10.0)
    hint = rate_limit_hint([("anthropic-ratelimit-requests-remaining", "40"),
                            ("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:20Z")],
                           now=1767225600.0)
    assert hint is not None and hint.pause is None  # 40 left: paced, not paused
    assert hint.remaining == {"requests": 40} and hint.resets == {"requests": 20.0}
    assert rate_limit_hint([("content-type", "text/event-stream")]) is None
    hint = rate_limit_hint([("retry-after", "3")])
    assert hint is not None and hint.pause == 3.0


def test_rate_limit_hint_reads_the_whole_limit() -> None:
    """With the limit's size sent too, a request limit used up pauses only until one
    request is back (OpenAI: 60 a minute, 0 left, whole again in 30 s: 0.5 s); a token
    limit used up is left to the pacing (each turn waits for its own tokens), not
    paused for; output tokens, which no turn is charged before it ends, still pause."""
    hint = rate_limit_hint([("x-ratelimit-limit-requests", "60"),
                            ("x-ratelimit-remaining-requests", "0"),
                            ("x-ratelimit-reset-requests", "30s"),
                            ("x-ratelimit-limit-tokens", "150000"),
                            ("x-ratelimit-remaining-tokens", "149000"),
                            ("x-ratelimit-reset-tokens", "400ms")])
    assert hint is not None and hint.pause == pytest.approx(0.5)
    assert hint.limits == {"requests": 60, "tokens": 150000}
    hint = rate_limit_hint([("anthropic-ratelimit-requests-limit", "50"),
                            ("anthropic-ratelimit-requests-remaining", "0"),
                            ("anthropic-ratelimit-requests-reset", "2026-01-01T00:01:00Z"),
                            ("anthropic-ratelimit-input-tokens-limit", "40000"),
                            ("anthropic-ratelimit-input-tokens-remaining", "0"),
                            ("anthropic-ratelimit-input-tokens-reset", "2026-01-01T00:00:10Z")],
                           now=1767225600.0)
    assert hint is not None and hint.pause == pytest.approx(1.2)  # one request back
    assert hint.limits == {"requests": 50, "input-tokens": 40000}
    assert hint.remaining["input-tokens"] == 0 and hint.resets["input-tokens"] == 10.0
    hint = rate_limit_hint([("anthropic-ratelimit-output-tokens-limit", "8000"),
                            ("anthropic-ratelimit-output-tokens-remaining", "0"),
                            ("anthropic-ratelimit-output-tokens-reset", "2026-01-01T00:00:10Z")],
                           now=1767225600.0)
    assert hint is not None and hint.pause == pytest.approx(10.0)
    hint = rate_limit_hint([("x-ratelimit-remaining-tokens", "0"),
                            ("x-ratelimit-reset-tokens", "6s")])  # no size: the reset
    assert hint is not None and hint.pause == 6.0
    hint = rate_limit_hint([("x-ratelimit-limit-requests", "0"),
                            ("x-ratelimit-remaining-requests", "0"),
                            ("x-ratelimit-reset-requests", "2s")])
    assert hint is not None and hint.pause == 2.0 and hint.limits == {}  # a 0 limit: no refill


def test_window_server_gap_follows_the_refill() -> None:
    """1 request of 60 left, 59 s to the reset: the bucket gives one back a second, so
    turns go 1 s apart (59 s without the limit); plenty left: spread until the reset."""
    assert window.server_gap(1, 59.0, 60) == pytest.approx(1.0)
    assert window.server_gap(1, 59.0) == pytest.approx(59.0)
    assert window.server_gap(59, 1.0, 60) == pytest.approx(1 / 59)
    assert window.server_gap(0, 30.0, 60) == pytest.approx(0.5)
    assert window.server_gap(0, 30.0) is None  # the pause's job
    assert window.server_gap(5, 0.0, 60) is None


@given(
    total=st.integers(1, 200),
    left=st.integers(0, 200),
    reset=st.floats(0.01, 120),
    turns=st.integers(1, 60),
)
def test_window_server_pacing_never_outruns_a_refilling_bucket(
    total: int, left: int, reset: float, turns: int
) -> None:
    """A server's token bucket of ``total`` with ``left`` in it, whole again in
    ``reset`` s (so refilling ``(total - left) / reset`` a second): ``turns`` that ask at
    once, paced as the limiter does from those headers, never find it empty before the
    reset."""
    left = min(left, total)
    now = 0.0
    hint = rate_limit_hint([("x-ratelimit-limit-requests", str(total)),
                            ("x-ratelimit-remaining-requests", str(left)),
                            ("x-ratelimit-reset-requests", f"{reset}s")])
    assert hint is not None
    state = window.pace(None, now, "requests", left, hint.resets["requests"], total)
    if hint.pause:
        state = window.pause(state, now + hint.pause, None)
    slots = []
    for _ in range(turns):
        state, reservation = window.reserve(state, now, {}, None, server={"requests": 1})
        slots.append(now + reservation.wait)
    rate = (total - left) / hint.resets["requests"]
    for sent, slot in enumerate(sorted(slots), start=1):
        if slot < hint.resets["requests"] - 1e-6:  # after the reset the bucket is whole
            assert sent <= left + rate * slot + 1e-6, (
                f"turn {sent} went at {slot:.4f} s with {left + rate * slot:.4f} in the bucket"
            )


async def test_rate_limiter_unknown_header_values_do_not_pause() -> None:
    hint = rate_limit_hint([("x-ratelimit-remaining-requests", "lots")])
    assert hint is None




async def test_rate_limiter_counts_input_with_the_clients_count_tokens() -> None:
    counted: list[int] = []

    class Recorder:
        async def admit(self, request: UnifiedRequest, count: Any) -> Any:
            counted.append(await count(request))
            return await RateLimiter().admit(request)

    async with open_replay_server(TEXT) as server:
        async with client(server.url, Recorder()) as c:  # type: ignore[arg-type]
            await c.generate(REQUEST)
            exact = await c.count_tokens(REQUEST)
    assert counted == [exact.tokens]
    assert exact.method.startswith("tiktoken") and exact.tokens != estimate_tokens(REQUEST)


@given(
    gaps=st.lists(st.floats(min_value=0, max_value=3), min_size=1, max_size=40),
    rpm=st.sampled_from([30, 60, 120, 600]),
)
def test_window_slots_never_closer_than_the_interval(gaps: list[float], rpm: int) -> None:
    """Whatever the arrival times, turns reserved one by one go at least 60/rpm apart
    (burst 1), and none waits longer than the queue ahead of it needs."""
    bucket = window.Bucket("requests_per_minute", rpm, 1)
    state: Any = None
    now, slots = 1000.0, []
    for gap in gaps:
        now += gap
        state, reservation = window.reserve(state, now, {bucket: 1}, None)
        slots.append(now + reservation.wait)
    for earlier, later in itertools.pairwise(slots):
        assert later - earlier >= bucket.interval - 1e-9
    assert slots[0] == 1000.0 + gaps[0]  # the first never waits


def test_window_pace_spreads_what_remains_until_the_reset() -> None:
    """4 requests remain until a reset in 8 s: the next turns go 2 s apart, at most 4
    before the reset; after it, only the configured rate (here none) spaces them."""
    state = window.pace(None, 100.0, "requests", 4, 8.0)
    slots = []
    for _ in range(6):
        state, reservation = window.reserve(state, 100.0, {}, None, server={"requests": 1})
        slots.append(100.0 + reservation.wait)
    assert slots == [100.0, 102.0, 104.0, 106.0, 108.0, 108.0]
    _, after = window.reserve(state, 108.5, {}, None, server={"requests": 1})
    assert after.wait == 0  # past the reset: the pacing is gone


def test_window_pace_owed_tokens_wait_for_each_turns_own_cost() -> None:
    """0 tokens left of 10,000, whole again in 60 s (166.7 a second): a turn of 500
    waits 3 s for its tokens, the next 500 another 3 s, one of 2,000 12 s more; a turn
    whose tokens would come back after the reset goes at the reset; a turn that costs
    the limit nothing is not held."""
    state = window.pace(None, 100.0, "tokens", 0, 60.0, 10_000)
    slots = []
    for cost in (500, 500, 2000):
        state, reservation = window.reserve(state, 100.0, {}, None, server={"tokens": cost})
        slots.append(100.0 + reservation.wait)
    assert slots == pytest.approx([103.0, 106.0, 118.0])
    _, big = window.reserve(state, 100.0, {}, None, server={"tokens": 9000})
    assert 100.0 + big.wait == pytest.approx(160.0)
    _, free = window.reserve(state, 100.0, {}, None, server={"requests": 1})
    assert free.wait == 0
    cancelled, _ = window.refund(state, {}, slots[-1], {"tokens": 2000})
    _, again = window.reserve(cancelled, 100.0, {}, None, server={"tokens": 2000})
    assert 100.0 + again.wait == pytest.approx(118.0)  # the refunded place, taken again


@given(
    total=st.integers(1, 100_000),
    reset=st.floats(0.01, 120),
    costs=st.lists(st.integers(1, 5_000), min_size=1, max_size=40),
)
def test_window_owed_tokens_never_outrun_the_refill(
    total: int, reset: float, costs: list[int]
) -> None:
    """A token bucket of ``total`` found empty, whole again in ``reset`` s: turns of any
    cost that ask at once, paced from those headers, never take more than has come back
    by the time each goes, before the reset."""
    hint = rate_limit_hint([("x-ratelimit-limit-tokens", str(total)),
                            ("x-ratelimit-remaining-tokens", "0"),
                            ("x-ratelimit-reset-tokens", f"{reset}s")])
    assert hint is not None and hint.pause is None
    state = window.pace(None, 0.0, "tokens", 0, hint.resets["tokens"], total)
    went = []
    for cost in costs:
        state, reservation = window.reserve(state, 0.0, {}, None, server={"tokens": cost})
        went.append((reservation.wait, cost))
    rate = total / hint.resets["tokens"]
    taken = 0
    for slot, cost in sorted(went):
        taken += cost
        if slot < hint.resets["tokens"] - 1e-6:
            assert taken <= rate * slot + 1e-6 * total, f"{taken} taken by {slot:.4f} s"


def test_window_pace_counts_the_turns_already_queued() -> None:
    """Three turns already wait (a configured 60/min); the server then says 3 remain
    until a reset in 9 s: those three are what remains, the fourth waits for the reset."""
    bucket = window.Bucket("requests_per_minute", 60, 1)
    state: Any = None
    for _ in range(4):
        state, _ = window.reserve(state, 100.0, {bucket: 1}, None, server={"requests": 1})
    # slots 100, 101, 102, 103 taken; the one at 100 has gone: 3 queued at 100.0+
    state = window.pace(state, 100.5, "requests", 3, 9.0)
    _, fifth = window.reserve(state, 100.5, {bucket: 1}, None, server={"requests": 1})
    assert 100.5 + fifth.wait >= 109.5 - 1e-9


def test_window_hold_keeps_a_waiter_behind_a_later_pause() -> None:
    state, _ = window.reserve(None, 100.0, {}, None, server={"requests": 1})
    state = window.pause(state, 105.0, None)
    state, held = window.hold(state, 100.0, 100.0, {"requests": 1})
    assert held == 105.0
    _, free = window.hold(state, 105.0, 105.0, {"requests": 1})
    assert free is None


turn_events = st.tuples(st.just("turn"), st.floats(0, 2), st.just(0), st.just(0.0))
header_events = st.tuples(
    st.just("header"), st.floats(0, 2), st.integers(0, 12), st.floats(0.05, 20)
)


@given(
    events=st.lists(st.one_of(turn_events, header_events), min_size=1, max_size=60),
    rpm=st.sampled_from([None, 60, 600]),
)
def test_window_pacing_never_sends_more_than_the_server_said_remain(
    events: list[tuple[str, float, int, float]], rpm: int | None
) -> None:
    """Whatever the headers (n remaining until a reset t away; n = 0 pauses) and the
    arrival of turns: from each header until its reset (or the next header), the turns
    admitted after it that go out number no more than it said remain, less the turns
    admitted before it that had not gone yet (those keep their slots; a waiter whose
    slot comes during a pause waits for its end: ``hold``, as the limiter does)."""
    import heapq

    bucket = None if rpm is None else window.Bucket("requests_per_minute", rpm, 1)
    costs = {} if bucket is None else {bucket: 1}
    server = {"requests": 1.0}
    state: Any = None
    now = 1000.0
    headers: list[tuple[float, int, float, int]] = []  # at, left, reset time, turns before
    sent: dict[int, float] = {}
    wakes: list[tuple[float, int, float]] = []  # when, turn, its slot

    def wake_until(limit: float) -> None:
        nonlocal state
        while wakes and wakes[0][0] <= limit:
            when, turn, slot = heapq.heappop(wakes)
            state, held = window.hold(state, when, slot, server)
            if held is None:
                sent[turn] = when
            else:
                heapq.heappush(wakes, (held, turn, held))

    turns = 0
    for kind, gap, left, reset in events:
        now += gap
        wake_until(now)
        if kind == "turn":
            state, reservation = window.reserve(state, now, costs, None, server=server)
            if reservation.wait > 0:
                heapq.heappush(wakes, (now + reservation.wait, turns, now + reservation.wait))
            else:
                sent[turns] = now
            turns += 1
        else:
            state = window.pace(state, now, "requests", left, reset)
            if left == 0:
                state = window.pause(state, now + reset, bucket)
            headers.append((now, left, now + reset, turns))
    wake_until(float("inf"))
    for i, (set_at, left, until, before) in enumerate(headers):
        end = min(until, headers[i + 1][0] if i + 1 < len(headers) else until)
        queued = sum(1 for n in range(before) if sent[n] >= set_at)
        went = [sent[n] for n in range(before, turns) if set_at <= sent[n] < end]
        assert len(went) <= max(0, left - queued), (
            f"{len(went)} new turns went between {set_at} and {end}, with {queued} queued; "
            f"the server said {left} remain"
        )


async def test_rate_limiter_owed_tokens_hold_a_turn_for_its_own_tokens_only(
    autojump_clock: MockClock,
) -> None:
    """The server's answer says no tokens are left of 10,000 a minute, whole again in
    60 s: the next turn (its prompt estimate and its 64 max_tokens) waits for those
    tokens to come back, about half a second, not for the whole minute."""
    headers = [("content-type", "text/event-stream"),
               ("x-ratelimit-limit-tokens", "10000"),
               ("x-ratelimit-remaining-tokens", "0"),
               ("x-ratelimit-reset-tokens", "1m0s")]
    times: list[float] = []

    def answer(request: Any) -> Reply:
        times.append(trio.current_time())
        return Reply(transcript("openai/text"), headers=headers)

    # a clock that moves on at each look, as a real one does (trio's mock clock stands
    # still while a turn runs on loopback: the first turn would still count as queued
    # when its own answer is read, and be paid for twice)
    ticks = itertools.count()
    clock = lambda: trio.current_time() + next(ticks) * 1e-6  # noqa: E731
    limiter = RateLimiter(requests_per_minute=600, clock=clock)
    async with open_replay_server(answer) as server:
        async with client(server.url, limiter, retry=RetryPolicy.never()) as c:
            await c.generate(REQUEST)
            await c.generate(REQUEST)
    cost = estimate_tokens(REQUEST) + 64
    assert times[1] - times[0] == pytest.approx(cost * 60 / 10_000, abs=0.01)


class FixedWindow:
    """A loopback server's own limit: ``limit`` requests per fixed window of ``seconds``
    (from its first request), said in OpenAI's headers on every answer; a request past
    it is a 429. Records each request's (trio) arrival time."""

    def __init__(self, limit: int, seconds: float) -> None:
        self.limit, self.seconds = limit, seconds
        self.start: float | None = None
        self.counts: dict[int, int] = {}
        self.times: list[float] = []
        self.refused = 0

    def __call__(self, request: Any) -> Reply:
        now = trio.current_time()
        self.start = now if self.start is None else self.start
        self.times.append(now - self.start)
        index = int((now - self.start) // self.seconds)
        self.counts[index] = self.counts.get(index, 0) + 1
        reset = self.start + (index + 1) * self.seconds - now
        if self.counts[index] > self.limit:
            self.refused += 1
            return Reply(b'{"error": {"message": "over"}}', status=429,
                         headers=[("content-type", "application/json"),
                                  ("retry-after", f"{reset:.3f}")])
        headers = [("content-type", "text/event-stream"),
                   ("x-ratelimit-remaining-requests", str(self.limit - self.counts[index])),
                   ("x-ratelimit-reset-requests", f"{reset:.3f}s")]
        return Reply(transcript("openai/text"), headers=headers)


async def paced_run(limiters: list[RateLimiter], turns: int) -> FixedWindow:
    """One turn to learn the server's headers, then ``turns`` at once, spread over the
    clients of ``limiters`` (one client each)."""
    server_limit = FixedWindow(limit=4, seconds=8.0)
    async with open_replay_server(server_limit) as server:
        clients = [client(server.url, limiter, retry=RetryPolicy.never())
                   for limiter in limiters]
        try:
            await clients[0].generate(REQUEST)
            async with trio.open_nursery() as nursery:
                for n in range(turns):
                    nursery.start_soon(clients[n % len(clients)].generate, REQUEST)
        finally:
            for c in clients:
                await c.aclose()
    return server_limit


async def test_rate_limiter_paced_by_the_servers_remaining_requests(
    autojump_clock: MockClock,
) -> None:
    """The server allows 4 requests per 8 s window and says how many remain: after the
    first answer (3 remain, reset in 8 s), 7 turns at once are spread 8/3 s apart, the
    window's last one at its reset, then the configured 60/min; none is refused."""
    limiter = RateLimiter(requests_per_minute=60, clock=trio.current_time)
    server_limit = await paced_run([limiter], 7)
    times = server_limit.times
    assert server_limit.refused == 0, f"the server refused turns arriving at {times}"
    assert len(times) == 8
    assert all(count <= 4 for count in server_limit.counts.values()), server_limit.counts
    first_window = [t for t in times if t < 8.0]
    assert len(first_window) == 3  # what remained after the first: 3, spaced
    gaps = [b - a for a, b in itertools.pairwise(sorted(times))]
    assert min(gaps[:3]) >= 8 / 3 - 0.01, f"turns went {gaps} s apart"


async def test_rate_limiter_pacing_shared_through_a_store(autojump_clock: MockClock) -> None:
    """Two limiters on one store (two processes' worth): the pacing one learned holds
    the other's turns too; the server's limit is never passed."""
    store = MemoryStore()
    limiters = [RateLimiter(requests_per_minute=60, store=store, clock=trio.current_time)
                for _ in range(2)]
    server_limit = await paced_run(limiters, 7)
    assert server_limit.refused == 0, f"the server refused turns arriving at {server_limit.times}"
    assert all(count <= 4 for count in server_limit.counts.values()), server_limit.counts
    gaps = [b - a for a, b in itertools.pairwise(sorted(server_limit.times))]
    assert min(gaps[:3]) >= 8 / 3 - 0.01, f"turns went {gaps} s apart"


class RefillingBucket:
    """A loopback server's own limit as OpenAI and Anthropic keep theirs: a bucket of
    ``limit`` requests refilled ``rate`` a second, starting with ``level`` in it, said in
    OpenAI's headers with the limit itself (``x-ratelimit-limit-requests``) and the
    time until it is whole again; a request finding it empty is a 429."""

    def __init__(self, limit: int, rate: float, level: float) -> None:
        self.limit, self.rate, self.level = limit, rate, level
        self.last: float | None = None
        self.times: list[float] = []
        self.refused = 0

    def __call__(self, request: Any) -> Reply:
        now = trio.current_time()
        if self.last is not None:
            self.level = min(self.limit, self.level + (now - self.last) * self.rate)
        self.last = now
        self.times.append(now)
        if self.level < 1:
            self.refused += 1
            return Reply(b'{"error": {"message": "over"}}', status=429,
                         headers=[("content-type", "application/json"),
                                  ("retry-after", f"{(1 - self.level) / self.rate:.3f}")])
        self.level -= 1
        headers = [("content-type", "text/event-stream"),
                   ("x-ratelimit-limit-requests", str(self.limit)),
                   ("x-ratelimit-remaining-requests", str(int(self.level))),
                   ("x-ratelimit-reset-requests", f"{(self.limit - self.level) / self.rate:.3f}s")]
        return Reply(transcript("openai/text"), headers=headers)


async def test_rate_limiter_paced_by_a_refilling_servers_limit(autojump_clock: MockClock) -> None:
    """The server's bucket holds 6 and refills 1 a second; after the first answer 1 is
    left and it is whole again in 5 s. Six turns at once go 1 s apart as the bucket
    refills, none refused; spread over the reset instead (5 s for the one left), each
    waited for the reset and then they went in a burst."""
    server_limit = RefillingBucket(limit=6, rate=1.0, level=2)
    limiter = RateLimiter(requests_per_minute=600, clock=trio.current_time)
    async with open_replay_server(server_limit) as server:
        async with client(server.url, limiter, retry=RetryPolicy.never()) as c:
            await c.generate(REQUEST)
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(c.generate, REQUEST)
    assert server_limit.refused == 0, f"the server refused turns arriving at {server_limit.times}"
    went = [t - start for t in server_limit.times[1:]]
    assert len(went) == 6
    assert went[:5] == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0], abs=0.01), went
    assert went[5] - went[4] >= 0.1 - 1e-6  # after the reset: the configured 600/min
