"""A pool of three real ``llama-server`` processes (SmolLM2 135M), one killed mid-run.

Two workers keep sending short turns through ``CucaClient(base_url=[u1, u2, u3])``.
After a few turns the second server is killed (SIGKILL, at a moment when no turn is
streaming from it) while the workers go on. Every turn must complete, the ones sent to
the dead server on another one; the dead server is tried once, then again only after
its cool-down (each attempt a single connection: a pool does not retry in place).

The workers run until the dead server has been probed twice, not for a fixed number of
turns: on a busy machine 24 turns may all fit in one cool-down (it failed once so:
``assert len(after) >= 2``), and how many probes a fixed run sees is the machine's
speed, not the pool's behaviour.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
import trio
from support.llama_server import LlamaServer, running_llama_server

from cuca import CucaClient, PoolPolicy, ProviderEndpoint, Text, UnifiedRequest
from cuca.routing.pool import Member, PoolState

pytestmark = pytest.mark.slow

COOL_DOWN = 1.0
TURNS_BEFORE_KILL = 6
TURNS = 24
REQUEST = UnifiedRequest.new("smollm2").add_user_message("Say hi.").set_max_tokens(4)


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[LlamaServer]]:
    with ExitStack() as stack:
        yield [stack.enter_context(running_llama_server()) for _ in range(3)]


async def test_pool_of_llama_servers_survives_one_killed_mid_run(
    fleet: list[LlamaServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = [server.url for server in fleet]
    victim = fleet[1]
    attempts: list[tuple[float, str]] = []  # every server a turn was sent to, and when
    choose = PoolState.choose

    def logged(state: PoolState, now: float, exclude: list[Member] | None = None) -> Member | None:
        member = choose(state, now, exclude or [])
        if member is not None:
            attempts.append((now, member.url))
        return member

    monkeypatch.setattr(PoolState, "choose", logged)
    answered: list[tuple[float, str]] = []  # when each turn ended, and who answered it
    killed_at: list[float] = []
    policy = PoolPolicy(cool_down=COOL_DOWN)
    async with CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=urls, pool=policy) as client:
        assert client._pool is not None
        dead = client._pool.state.members[1]

        def probes() -> list[float]:
            """When the dead server was tried since the kill."""
            return [t for t, url in attempts if killed_at and t >= killed_at[0]
                    and url == victim.url]  # fmt: skip

        async def worker() -> None:
            while len(answered) < TURNS or len(probes()) < 2:
                async with client.generate_stream(REQUEST) as stream:
                    texts = [item async for item in stream if isinstance(item, Text)]
                assert stream.response is not None and texts
                assert stream.response.endpoint is not None
                answered.append((trio.current_time(), stream.response.endpoint))
                await trio.sleep(0.05)  # turns keep coming while the cool-downs pass

        async def killer() -> None:
            while len(answered) < TURNS_BEFORE_KILL or dead.in_flight:
                await trio.sleep(0.01)
            victim.process.kill()  # no await between the check and the kill
            killed_at.append(trio.current_time())
            victim.process.wait()

        with trio.fail_after(240):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker)
                nursery.start_soon(worker)
                nursery.start_soon(killer)

    (kill_time,) = killed_at
    before = [url for t, url in attempts if t < kill_time]
    after = [t for t, url in attempts if t >= kill_time and url == victim.url]
    assert set(before) == set(urls)  # all three served before the kill
    assert len(answered) >= TURNS  # every turn completed, none failed
    assert [url for t, url in answered if t > kill_time].count(victim.url) == 0
    # the dead server: tried, then only after each cool-down (a probe each time)
    assert after, "no turn went to the dead server after the kill"
    for earlier, later in itertools.pairwise(after):
        assert later - earlier >= COOL_DOWN
    assert len(after) >= 2  # tried at the kill, then probed after its cool-down
