"""Pools of servers: ``CucaClient(..., base_url=[u1, u2, u3])``.

The breaker's rules on :class:`PoolState` with time passed in, then whole turns over
loopback replay servers: spreading, moving a turn to another server before its first
item (each server asked once), ejection for the cool-down and the probe after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio
from support.transcripts import transcript
from trio.testing import MockClock

from cuca import (
    ConfigurationError,
    ConnectError,
    CucaClient,
    HttpStatusError,
    PoolPolicy,
    ProviderEndpoint,
    RetryPolicy,
    StreamIncomplete,
    Text,
    UnifiedRequest,
)
from cuca.routing.pool import Health, PoolState
from cuca.testing import ReplayServer, Reply, open_replay_server

REQUEST = UnifiedRequest.new("qwen3").add_user_message("Hello?")
TEXT = Reply(transcript("openai/text"))
UNAVAILABLE = Reply(b'{"error": {"message": "loading model"}}', status=503)


# -- the bookkeeping, with time passed in ----------------------------------------------


def test_pool_state_least_in_flight_then_fewest_started() -> None:
    state = PoolState(["a", "b", "c"], PoolPolicy())
    first, second = state.choose(0.0), state.choose(0.0)
    assert first is not None and second is not None
    assert [first.url, second.url] == ["a", "b"]
    state.done(first)
    third = state.choose(0.0)  # a and c have nothing in flight; c has started fewer turns
    assert third is not None and third.url == "c"
    assert [m.in_flight for m in state.members] == [0, 1, 1]
    fourth = state.choose(0.0)
    assert fourth is not None and fourth.url == "a"


def test_pool_state_ejects_for_the_cool_down_then_one_probe() -> None:
    state = PoolState(["a", "b"], PoolPolicy(cool_down=5.0))
    a = state.choose(0.0)
    assert a is not None
    state.failed(a, now=1.0)
    state.done(a)
    assert a.health is Health.OPEN
    for now in (1.0, 3.0, 5.9):  # only b until the cool-down is over
        member = state.choose(now)
        assert member is not None and member.url == "b"
        state.done(member)
    probe = state.choose(6.0, exclude=[state.members[1]])
    assert probe is a and a.health is Health.PROBING
    assert state.choose(6.0, exclude=[state.members[1]]) is None  # one probe at a time
    state.failed(a, now=6.5)  # the probe failed: out for another cool-down
    state.done(a)
    assert (a.health, a.open_until) == (Health.OPEN, 11.5)
    probe = state.choose(11.5, exclude=[state.members[1]])
    assert probe is a
    state.answered(a)
    state.done(a)
    assert (a.health, a.failures) == (Health.CLOSED, 0)


def test_pool_state_failures_in_a_row_before_ejection() -> None:
    state = PoolState(["a"], PoolPolicy(failures=2, cool_down=1.0))
    a = state.members[0]
    state.failed(a, now=0.0)
    assert a.health is Health.CLOSED
    state.failed(a, now=0.0)
    assert a.health is Health.OPEN
    assert state.choose(0.5) is None


def test_pool_state_cancelled_probe_is_open_again() -> None:
    state = PoolState(["a"], PoolPolicy(cool_down=1.0))
    a = state.members[0]
    state.failed(a, now=0.0)
    assert state.choose(1.0) is a
    state.done(a)  # cancelled before it answered
    assert a.health is Health.OPEN and state.choose(1.0) is a


# -- whole turns over loopback ---------------------------------------------------------


@asynccontextmanager
async def servers(*replies: Reply) -> AsyncIterator[list[ReplayServer]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(open_replay_server(r)) for r in replies]


async def answer(client: CucaClient) -> tuple[str, str | None]:
    """One turn's text and the server that answered it."""
    async with client.generate_stream(REQUEST) as stream:
        text = "".join([item.text async for item in stream if isinstance(item, Text)])
    assert stream.response is not None
    return text, stream.response.endpoint


def pool_client(urls: list[str], **policy: float) -> CucaClient:
    return CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=urls, pool=PoolPolicy(**policy))


async def test_pool_spreads_turns_and_names_the_server() -> None:
    async with servers(TEXT, TEXT, TEXT) as fleet:
        urls = [s.url for s in fleet]
        async with pool_client(urls) as client:
            answered = [(await answer(client))[1] for _ in range(6)]
        assert answered == urls + urls
        assert [len(s.requests) for s in fleet] == [2, 2, 2]


async def test_pool_concurrent_turns_go_to_the_least_busy() -> None:
    slow = Reply(transcript("openai/text"), chunks=[1] * 40, delay=0.01)
    async with servers(slow, slow, slow) as fleet:
        async with pool_client([s.url for s in fleet]) as client:
            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(answer, client)
        assert [len(s.requests) for s in fleet] == [2, 2, 2]


async def test_pool_failing_server_is_asked_once_then_cools_down(mock_clock: MockClock) -> None:
    """The pool's clock is trio's; a mock clock that moves only when the test jumps it
    makes the cool-down last across the four turns however slow they are."""
    async with servers(UNAVAILABLE, TEXT, TEXT) as (sick, *healthy):
        async with pool_client([sick.url, *(s.url for s in healthy)], cool_down=0.3) as client:
            text, endpoint = await answer(client)  # the first turn tries sick first
            assert endpoint == healthy[0].url and text.startswith("I'm unable")
            assert len(sick.requests) == 1  # once: a pool moves on instead of retrying
            for _ in range(4):
                await answer(client)
            assert len(sick.requests) == 1  # skipped during its cool-down
            mock_clock.jump(0.3)
            await answer(client)  # the probe, failing again, and the turn moves on
            assert len(sick.requests) == 2
        assert [len(s.requests) for s in healthy] == [3, 3]


async def test_pool_every_server_cooling_down() -> None:
    async with servers(UNAVAILABLE, UNAVAILABLE) as fleet:
        async with pool_client([s.url for s in fleet], cool_down=60) as client:
            with pytest.raises(HttpStatusError) as first:
                await answer(client)
            assert first.value.status == 503
            with pytest.raises(ConnectError, match="every server of the pool is cooling down"):
                await answer(client)
        assert [len(s.requests) for s in fleet] == [1, 1]


async def test_pool_no_move_after_the_first_item() -> None:
    body = transcript("openai/text")
    cut = Reply(body, cut_after=body.index(b"unable"))
    async with servers(cut, TEXT) as (a, b):
        async with pool_client([a.url, b.url]) as client:
            with pytest.raises(StreamIncomplete, match="connection closed mid-response"):
                await answer(client)
            assert (len(a.requests), len(b.requests)) == (1, 0)


async def test_pool_attempts_bound() -> None:
    async with servers(UNAVAILABLE, UNAVAILABLE, TEXT) as fleet:
        async with pool_client([s.url for s in fleet], attempts=2) as client:
            with pytest.raises(HttpStatusError) as caught:
                await answer(client)
            assert caught.value.status == 503
        assert [len(s.requests) for s in fleet] == [1, 1, 0]


async def test_pool_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ConfigurationError, match="one base URL or more"):
        CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=[])
    with pytest.raises(ConfigurationError, match="HTTP provider"):
        CucaClient(ProviderEndpoint.LOCAL, base_url=["http://127.0.0.1:1"])
    async with pool_client(["http://127.0.0.1:1"]) as client:
        with pytest.raises(ConfigurationError, match="retries on its other servers"):
            async with client.generate_stream(REQUEST, retry=RetryPolicy.never()):
                raise AssertionError
