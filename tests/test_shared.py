"""The limiter, the budget and the cache shared by several processes through a real
redis-server, against a loopback server; and a Redis stopped mid-run."""

from __future__ import annotations

import json
import sys
import time
from decimal import Decimal
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
    start = time.time() + 4.0  # every process imported and connected by then
    results: list[Any] = [None] * count

    async def one(index: int) -> None:
        done = await trio.run_process(
            [sys.executable, str(WORKER), mode, redis_url, url, str(start), "20", *extra],
            capture_stdout=True, capture_stderr=True, check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        results[index] = json.loads(done.stdout.decode().strip().splitlines()[-1])

    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(one, index)
    return results


@pytest.mark.slow
async def test_shared_limiter_four_processes_hold_120_per_minute(tmp_path: Path) -> None:
    with redis_server(tmp_path) as redis:
        async with open_replay_server(TEXT) as server:
            results = await workers("limiter", 4, redis.url, server.url)
    total = len(server.requests)
    print(f"\n4 processes, RateLimiter(requests_per_minute=120) in Redis, 20 s: "
          f"{total} requests reached the server ({[r['sent'] for r in results]} per process)")
    assert sum(r["sent"] for r in results) == total
    assert 38 <= total <= 42
    assert all(r["sent"] > 0 for r in results)  # every process got turns


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
