"""Benchmark what a rate limiter, a budget and a response cache add to a turn, on each
store, and how fast a cache hit reaches its last block.

Run ``python tests/benchmarks/bench_limits.py [--chunks N] [--rounds R]``: one command,
one run. The replay server of ``bench_openai_stream.py`` (a child process) serves an
OpenAI stream of N chunks (100 by default); a ``redis-server`` on a free loopback port
(persistence off) and a SQLite file in a temporary directory hold the shared state.
Variants take turns, round after round, so that a busy machine slows them alike:

- ``none``: a client with no feature (the baseline);
- ``limiter``: ``RateLimiter(requests_per_minute=10**7, max_concurrent=1000)``;
- ``limiter+itpm``: the same with ``input_tokens_per_minute`` (the prompt counted with
  ``count_tokens``: tiktoken for OpenAI);
- ``budget``: ``Budget(usd=10**6)`` (counts the prompt too);
- ``cache miss``: ``ResponseCache`` with a new request every turn (lookup, then the
  turn kept);

each on ``MemoryStore``, ``SqliteStore`` and ``RedisStore``. Reported: the median wall
time per turn (ms) and each variant's overhead over ``none`` (the median over rounds of
the difference within a round). Then what the limiter adds per turn when the server sends
OpenAI's rate-limit headers (``x-ratelimit-remaining-*`` with ``-reset-*``: one store
update keeping the pacing, timed on each store), and a cache hit's time to the last
block against the same turn from the loopback server. Never part of pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from bench_openai_stream import API_KEY, MODEL
from bench_openai_stream import start_server as serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.stores import redis_server

from cuca import (
    Budget,
    CucaClient,
    CucaPlugin,
    ProviderEndpoint,
    RateLimiter,
    ResponseCache,
    UnifiedRequest,
)
from cuca.providers.ratelimit import rate_limit_hint
from cuca.store import MemoryStore, RedisStore, SqliteStore, Store
from cuca.turn import RateLimitHint


def read(headers: tuple[tuple[str, str], ...]) -> RateLimitHint:
    hint = rate_limit_hint(headers)
    assert hint is not None
    return hint

TURNS = 10


def start_server(chunks: int) -> tuple[subprocess.Popen[str], str]:
    """The loopback server of bench_openai_stream, streaming ``chunks * 10`` chunks."""
    return serve(chunks * 10)


Turn = Callable[[int], Awaitable[None]]


def variant(
    url: str, limiter: RateLimiter | None = None, plugins: tuple[CucaPlugin, ...] = ()
) -> tuple[CucaClient, Turn]:
    client = CucaClient(
        ProviderEndpoint.OPENAI, base_url=url, api_key=API_KEY,
        rate_limiter=limiter, plugins=plugins,
    )
    unique = any(isinstance(p, ResponseCache) for p in plugins)

    async def turn(n: int) -> None:
        request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
        request = request.set_temperature(0).set_max_tokens(4096)
        if unique:
            request = request.add_user_message(f"turn {n} {time.time_ns()}")  # always a miss
        async with client.generate_stream(request) as stream:
            async for _ in stream:
                pass
        assert stream.response is not None

    return client, turn


def variants(url: str, stores: dict[str, Store]) -> dict[str, tuple[CucaClient, Turn]]:
    found = {"none": variant(url)}
    for name, store in stores.items():
        found[f"limiter {name}"] = variant(
            url, RateLimiter(requests_per_minute=10**7, max_concurrent=1000, store=store,
                             key=f"bench:{name}:limiter")
        )
        found[f"limiter+itpm {name}"] = variant(
            url, RateLimiter(requests_per_minute=10**7, input_tokens_per_minute=10**9,
                             store=store, key=f"bench:{name}:itpm")
        )
        found[f"budget {name}"] = variant(
            url, plugins=(Budget(usd=10**6, store=store, key=f"bench:{name}:budget"),)
        )
        found[f"cache miss {name}"] = variant(
            url, plugins=(ResponseCache(store=store, prefix=f"bench:{name}:cache"),)
        )
    return found


async def timed(turn: Turn, turns: int) -> tuple[float, float]:
    """Mean wall and CPU seconds (this process, its threads included) per turn."""
    start, cpu = time.perf_counter(), time.process_time()
    for n in range(turns):
        await turn(n)
    return (time.perf_counter() - start) / turns, (time.process_time() - cpu) / turns


Timings = dict[str, list[tuple[float, float]]]


async def run_rounds(url: str, stores: dict[str, Store], rounds: int) -> Timings:
    table = variants(url, stores)
    results: Timings = {name: [] for name in table}
    for _, turn in table.values():
        await timed(turn, 2)  # warm-up: connections, tiktoken's tables, SQLite's schema
    for _ in range(rounds):
        for name, (_, turn) in table.items():
            results[name].append(await timed(turn, TURNS))
    for client, _ in table.values():
        await client.aclose()
    return results


async def hit_vs_live(url: str, stores: dict[str, Store], rounds: int) -> dict[str, float]:
    """Median seconds to the last block: the live turn, and a hit on each store."""
    request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
    request = request.set_temperature(0).set_max_tokens(4096)
    out: dict[str, list[float]] = {"live": []}
    live = CucaClient(ProviderEndpoint.OPENAI, base_url=url, api_key=API_KEY)
    cached: dict[str, CucaClient] = {}
    for name, store in stores.items():
        cache = ResponseCache(store=store, prefix=f"bench:{name}:hit")
        cached[name] = CucaClient(ProviderEndpoint.OPENAI, base_url=url, api_key=API_KEY,
                                  plugins=[cache])
        await cached[name].generate(request)  # kept
        out[f"hit {name}"] = []

    async def last_block(client: CucaClient) -> float:
        start = time.perf_counter()
        async with client.generate_stream(request) as stream:
            async for _ in stream:
                pass
        return time.perf_counter() - start

    for _ in range(rounds * TURNS):
        out["live"].append(await last_block(live))
        for name, client in cached.items():
            out[f"hit {name}"].append(await last_block(client))
    for client in (live, *cached.values()):
        await client.aclose()
    return {name: statistics.median(times) for name, times in out.items()}


HEADERS = (
    ("x-ratelimit-limit-requests", "10000"),
    ("x-ratelimit-remaining-requests", "9999"),
    ("x-ratelimit-reset-requests", "6ms"),
    ("x-ratelimit-limit-tokens", "30000000"),
    ("x-ratelimit-remaining-tokens", "29999000"),
    ("x-ratelimit-reset-tokens", "2ms"),
)
"""What OpenAI sends with every answer (well under its limits)."""


async def steer_cost(stores: dict[str, Store], rounds: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of one ``steer`` on the headers above (read by the
    adapter's reading, as a turn's head is), per store."""
    out: dict[str, tuple[float, float]] = {}
    for name, store in stores.items():
        limiter = RateLimiter(requests_per_minute=10**7, store=store, key=f"bench:{name}:steer")
        await limiter.steer(read(HEADERS))  # warm-up
        walls, cpus = [], []
        for _ in range(rounds):
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(TURNS):
                await limiter.steer(read(HEADERS))
            walls.append((time.perf_counter() - start) / TURNS)
            cpus.append((time.process_time() - cpu) / TURNS)
        out[name] = (statistics.median(walls), statistics.median(cpus))
    return out


def report(
    results: Timings,
    hits: dict[str, float],
    chunks: int,
    steering: dict[str, tuple[float, float]],
) -> None:
    base = results["none"]
    print(f"\nper turn, {chunks}-chunk OpenAI stream over loopback "
          f"({len(base)} rounds x {TURNS} turns; overhead: median over rounds of the "
          "difference with none)")
    print(f"{'variant':24} {'wall ms':>8} {'+wall ms':>9} {'cpu ms':>8} {'+cpu ms':>8} "
          f"{'cpu ratio':>9}")
    for name, times in results.items():
        walls, cpus = [t[0] for t in times], [t[1] for t in times]
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        extra_wall = statistics.median(t[0] - b[0] for t, b in zip(times, base, strict=True))
        extra_cpu = statistics.median(t[1] - b[1] for t, b in zip(times, base, strict=True))
        ratio = cpu / statistics.median(b[1] for b in base)
        print(f"{name:24} {wall * 1e3:8.2f} {extra_wall * 1e3:9.2f} {cpu * 1e3:8.2f} "
              f"{extra_cpu * 1e3:8.2f} {ratio:9.2f}")
    print("\nthe server's rate-limit headers, read and kept (RateLimiter.steer), per turn")
    for name, (wall, cpu) in steering.items():
        print(f"{'steer ' + name:24} {wall * 1e3:8.2f} ms wall {cpu * 1e3:8.2f} ms cpu")
    live = hits["live"]
    print("\ntime to the last block: the live turn vs a cache hit")
    for name, seconds in hits.items():
        print(f"{name:24} {seconds * 1e3:9.2f} ms   {live / seconds:6.1f}x faster than live"
              if name != "live" else f"{name:24} {seconds * 1e3:9.2f} ms")


async def main(chunks: int, rounds: int) -> None:
    server, base = start_server(chunks)
    url = f"{base}/n{chunks}/v1"
    try:
        with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as redis:
            stores: dict[str, Store] = {
                "memory": MemoryStore(),
                "sqlite": SqliteStore(Path(tmp) / "bench.db"),
                "redis": RedisStore(redis.url),
            }
            results = await run_rounds(url, stores, rounds)
            steering = await steer_cost(stores, rounds)
            hits = await hit_vs_live(url, stores, rounds)
            for store in stores.values():
                await store.aclose()
    finally:
        server.terminate()
        server.wait()
    report(results, hits, chunks, steering)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args: Any = parser.parse_args()
    trio.run(main, args.chunks, args.rounds)
