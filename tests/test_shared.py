"""The limiter, the budget and the cache shared by several processes through a real
redis-server, against a loopback server; and a Redis stopped mid-run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from support.stores import redis_server
from support.transcripts import transcript

from cuca import (
    Budget,
    CucaClient,
    ProviderEndpoint,
    RateLimiter,
    ResponseCache,
    StoreError,
    UnifiedRequest,
)
from cuca.store import RedisStore
from cuca.testing import Reply, open_replay_server

WORKER = Path(__file__).resolve().parent / "scripts" / "shared_worker.py"
TEXT = Reply(transcript("openai/text"))
# the same answer with a usage that fits the request's projection (9 prompt tokens
# counted by tiktoken, max_tokens 64): the budget's bound is then one reservation
SMALL = Reply(
    transcript("openai/text")
    .replace(b'"prompt_tokens":1117', b'"prompt_tokens":9')
    .replace(b'"cached_tokens":1024', b'"cached_tokens":0'),
    chunks=(256,) * 8,
    delay=0.02,  # turns of ~0.2 s: the three processes' turns overlap
)
REQUEST = (
    UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64).set_temperature(0)
)


async def workers(mode: str, count: int, redis_url: str, url: str, *extra: str) -> list[Any]:
    """Run ``count`` worker processes; they start their turns together, once every one
    of them is imported and ready (not at a time guessed in advance: on a busy machine
    a process may take longer than that to start, and miss the run)."""
    results: list[Any] = [None] * count
    ready = [trio.Event() for _ in range(count)]
    go: list[float] = []
    started = trio.Event()

    async def one(index: int) -> None:
        out, err = bytearray(), bytearray()

        async def read(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
            while chunk := await stream.receive_some():
                into += chunk
                if into is out and b"ready\n" in out:
                    ready[index].set()

        command = [sys.executable, str(WORKER), mode, redis_url, url, "20", *extra]
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(partial(
                trio.run_process, command, check=False,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            ))
            assert process.stdin and process.stdout and process.stderr
            nursery.start_soon(read, process.stdout, out)
            nursery.start_soon(read, process.stderr, err)
            async with trio.open_nursery() as waiting:  # for the start, or its end

                async def ended() -> None:
                    await process.wait()
                    waiting.cancel_scope.cancel()

                waiting.start_soon(ended)
                await started.wait()
                waiting.cancel_scope.cancel()
            if process.returncode is None:
                await process.stdin.send_all(f"{go[0]!r}\n".encode())
            await process.stdin.aclose()
        assert process.returncode == 0, err.decode()[-2000:]
        results[index] = json.loads(out.decode().strip().splitlines()[-1])

    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(one, index)
        for event in ready:
            await event.wait()
        go.append(time.time() + 0.5)  # the same start for all, a moment from now
        started.set()
    return results


@pytest.mark.slow
async def test_shared_limiter_four_processes_hold_120_per_minute(tmp_path: Path) -> None:
    """Four processes share one ``RateLimiter(requests_per_minute=120)`` through a real
    redis-server, eight turns in flight each, asking for slots until the next one is
    past 20 s: together they get exactly the 41 slots of 20 s at 120 a minute (at 0,
    0.5, ..., 20 s), and no request reaches the server before its slot.

    The verdict does not depend on how busy the machine is: the limiter's clock, the
    same in every process, is stopped at the start, so the slots are counted from it
    however late a turn asks for one (on a wall clock, a process that could not ask
    fast enough lost slots: 7 to 29 of 40 at load 12 to 24), while each turn still
    waits its slot's time for real before it is sent. How the window moves on as time
    passes is tested on a mock clock in ``test_limits.py``.

    Broken either way, it fails: a limit kept per process (164 slots, or 44 at a
    per-process 30 a minute), a reservation lost to a concurrent update (more than 41),
    a turn charged twice (21), a refusal before the last slot (fewer than 41), or a
    limiter that counts slots but does not wait for them (requests early)."""
    arrived: list[float] = []

    def reply(_request: object) -> Reply:
        arrived.append(time.time())
        return TEXT

    with redis_server(tmp_path) as redis:
        async with open_replay_server(reply) as server:
            with trio.fail_after(300):  # a guard against a hang, not a measure
                results = await workers("limiter", 4, redis.url, server.url)
    total, start = len(server.requests), results[0]["start"]
    print(f"\n4 processes, RateLimiter(requests_per_minute=120) in Redis, 20 s: "
          f"{total} requests reached the server ({[r['sent'] for r in results]} per process), "
          f"the last {max(arrived, default=start) - start:.1f} s after the start")
    assert sum(r["sent"] for r in results) == total == 41
    # every process got turns (the others take the last slots only as their first
    # turns end, 8 s or more after the start: a process would have to ask later still)
    assert all(r["sent"] > 0 for r in results)
    early = [
        (n, round(at - start, 3)) for n, at in enumerate(sorted(arrived))
        if at < start + n * 0.5 - 0.05  # (the wall clock may be slewed a little)
    ]
    assert not early, f"requests sent before their slot (n, seconds after the start): {early}"


@pytest.mark.slow
async def test_shared_budget_three_processes_never_overspend(tmp_path: Path) -> None:
    budget = Budget(usd=1)
    async with open_replay_server(SMALL) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=f"{server.url}/v1") as c:
            prompt = (await c.count_tokens(REQUEST)).tokens
        reservation = budget.project(REQUEST.with_provider(ProviderEndpoint.OPENAI), prompt).usd
        assert reservation is not None
        limit = reservation * Decimal("12.5")
        with redis_server(tmp_path) as redis:
            results = await workers("budget", 3, redis.url, server.url, str(limit))
            store = RedisStore(redis.url)
            spent = (await Budget(usd=limit, store=store).spent())["usd"]
            await store.aclose()
    print(f"\n3 processes sharing Budget(usd={limit:.6f}): spent {spent:.6f} over "
          f"{len(server.requests)} turns ({[r['sent'] for r in results]} per process)")
    assert all(r["refused"] for r in results)
    assert 0 < spent <= limit + reservation
    assert len(server.requests) == sum(r["sent"] for r in results) >= 12


@pytest.mark.slow
async def test_shared_cache_second_process_hits(tmp_path: Path) -> None:
    with redis_server(tmp_path) as redis:
        async with open_replay_server(TEXT) as server:
            first = await workers("cache", 1, redis.url, server.url)
            second = await workers("cache", 1, redis.url, server.url)
    assert first[0]["cached"] == 0 and second[0]["cached"] == 1
    assert len(server.requests) == 1


async def test_shared_redis_stopped_mid_run_fails_turns_with_store_error(tmp_path: Path) -> None:
    with redis_server(tmp_path) as redis:
        store = RedisStore(redis.url, timeout=1.0)
        features: list[dict[str, Any]] = [
            {"rate_limiter": RateLimiter(requests_per_minute=6000, store=store)},
            {"plugins": [Budget(tokens=10**9, store=store)]},
            {"plugins": [ResponseCache(store=store)]},
        ]
        async with open_replay_server(TEXT) as server:
            url = f"{server.url}/v1"
            clients = [CucaClient(ProviderEndpoint.OPENAI, base_url=url, **f) for f in features]
            for c in clients:
                await c.generate(REQUEST)
            redis.stop()
            for c in clients:
                with trio.fail_after(5), pytest.raises(StoreError, match="redis"):
                    await c.generate(REQUEST)  # never a hang, never a silent pass
            sent = len(server.requests)
            open_limiter = RateLimiter(requests_per_minute=6000, store=store, fail_open=True)
            async with CucaClient(
                ProviderEndpoint.OPENAI, base_url=url, rate_limiter=open_limiter,
                plugins=[ResponseCache(store=store, fail_open=True)],
            ) as c:
                with trio.fail_after(10):
                    await c.generate(REQUEST)  # fail_open: both step aside
            for c in clients:
                await c.aclose()
        await store.aclose()
    assert sent == 3 and len(server.requests) == 4
