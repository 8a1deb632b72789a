"""Benchmark what a turn's seams cost per chunk: a fused turn with a ``RateLimiter``, a
``Budget`` and a ``ResponseCache`` (a miss) against the same turn without them.

Run ``python tests/benchmarks/bench_seams.py [--chunks N] [--rounds R]``: one command,
one run. The replay server of ``bench_openai_stream.py`` (a child process) serves an
OpenAI stream of a tenth of N chunks and of N (20,000 by default), in 64 KiB writes.
Variants take turns, round after round (R rounds, 7 by default), so that a busy machine
slows them alike:

- ``plain``: a client with no feature;
- ``gates``: ``RateLimiter(requests_per_minute=10**7, max_concurrent=1000)`` and
  ``Budget(usd=10**6)`` (admitted before the request goes out, told the 2xx head,
  settled after);
- ``gates+cache``: the same and a ``ResponseCache`` that misses (a new request every
  turn): the lookup before, the backend's blocks recorded during, the entry kept after;
- ``gates+cache (actors)``: the same turn with ``fused=False`` (reported).

CPU is this process's ``time.process_time`` around one whole turn (its own
``trio.run``); a variant's CPU per 1,000 chunks is the slope between the two lengths, and
its ratio to ``plain`` is the median over rounds of the ratio within a round. The tasks
each variant's turn runs (``client.pipeline().tasks()``) are printed too: the seams add
none. Target: ``gates+cache`` at most 1.05x ``plain``. Never part of pass/fail.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio
from bench_openai_stream import API_KEY, MODEL, lengths
from bench_openai_stream import start_server as serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuca import (
    Budget,
    CucaClient,
    CucaPlugin,
    ProviderEndpoint,
    RateLimiter,
    ResponseCache,
    Text,
    UnifiedRequest,
)

CHUNKS = 20_000
ROUNDS = 7
_turn = itertools.count()


def plugins(variant: str) -> tuple[list[CucaPlugin], RateLimiter | None]:
    if variant == "plain":
        return [], None
    chosen: list[CucaPlugin] = [Budget(usd=10**6)]
    if variant.startswith("gates+cache"):
        chosen.append(ResponseCache())
    return chosen, RateLimiter(requests_per_minute=10**7, max_concurrent=1000)


def client(url: str, variant: str) -> CucaClient:
    chosen, limiter = plugins(variant)
    return CucaClient(
        ProviderEndpoint.OPENAI,
        base_url=f"{url}/v1",
        api_key=API_KEY,
        plugins=chosen,
        rate_limiter=limiter,
        fused="actors" not in variant,
    )


async def turn(url: str, variant: str) -> int:
    # a new request every turn (temperature 0: one the cache keeps): it always misses,
    # looks up, records the blocks and keeps the turn
    text = f"Say hello many times ({next(_turn)})."
    request = UnifiedRequest.new(MODEL).add_user_message(text).set_temperature(0)
    blocks = 0
    async with client(url, variant) as c, c.generate_stream(request) as stream:
        async for item in stream:
            if isinstance(item, Text):
                blocks += 1
    assert stream.response is not None
    return blocks


def cpu(url: str, variant: str) -> tuple[float, int]:
    start = time.process_time()
    blocks = trio.run(turn, url, variant)
    return time.process_time() - start, blocks


VARIANTS = ("plain", "gates", "gates+cache", "gates+cache (actors)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    short, long = lengths(args.chunks)
    process, url = serve(args.chunks)
    slopes: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for variant in VARIANTS:  # warm-up: imports, caches
            cpu(f"{url}/n{short}", variant)
        for _ in range(args.rounds):
            for variant in VARIANTS:
                small, got_short = cpu(f"{url}/n{short}", variant)
                large, got_long = cpu(f"{url}/n{long}", variant)
                assert (got_short, got_long) == (short, long), (variant, got_short, got_long)
                slopes[variant].append((large - small) * 1000 / ((long - short) / 1000))
    finally:
        process.terminate()
        process.wait()
    report(slopes, short, long, args.rounds)


def report(slopes: dict[str, list[float]], short: int, long: int, rounds: int) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{short:,} and {long:,} chunks over loopback, {rounds} alternated rounds "
          f"(load average {load:.1f} at the end)\n")
    print(f"{'variant':24} {'ms/1k chunks':>13} {'x plain':>8}   tasks of its turn")
    for variant, runs in slopes.items():
        ratio = statistics.median(r / p for r, p in zip(runs, slopes["plain"], strict=True))
        tasks = tasks_of(variant)
        print(f"{variant:24} {statistics.median(runs):>13.2f} {ratio:>7.3f}x   {tasks}")
    ratio = statistics.median(
        r / p for r, p in zip(slopes["gates+cache"], slopes["plain"], strict=True)
    )
    met = "met" if ratio <= 1.05 else "MISSED"
    print(f"\ngates+cache / plain, CPU per chunk: {ratio:.3f}x (target <= 1.05x: {met})")


def tasks_of(variant: str) -> Any:
    c = client("http://127.0.0.1:1", variant)
    return c.pipeline().tasks(fused="actors" not in variant)


if __name__ == "__main__":
    main()
