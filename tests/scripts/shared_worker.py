"""One process of the multi-process tests (``tests/test_shared.py``): runs turns against
a loopback server through a RateLimiter, a Budget or a ResponseCache whose state is in
Redis, and prints one JSON line of what it saw.

``shared_worker.py limiter|budget|cache REDIS_URL SERVER_URL SECONDS [USD]``: once
imported and connected to Redis, it prints ``ready`` and reads the wall-clock start
time from its stdin (the test sends it once every process is ready, however slow the
machine is to start them). The turns start then, and stop at the first refusal
(limiter: IN_FLIGHT turns at once, each asking for the next slot until one is past
SECONDS; the limiter's clock is stopped at the start, shared by every process, so
which slots there are does not depend on how fast the machine is), at the first
BudgetExceeded (budget), or after one turn (cache). The JSON line holds the start
too.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import trio

from cuca import (
    Budget,
    BudgetExceeded,
    CucaClient,
    ProviderEndpoint,
    RateLimiter,
    RateLimitExceeded,
    ResponseCache,
    UnifiedRequest,
)
from cuca.store import RedisStore

IN_FLIGHT = 8  # a process's turns at once (limiter)
REQUEST = (
    UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64).set_temperature(0)
)


async def main(mode: str, redis_url: str, url: str, seconds: float, usd: float) -> None:
    store = RedisStore(redis_url)
    await store.get("cuca:warm-up")  # connected before the start, not after it
    print("ready", flush=True)
    start = float(await trio.to_thread.run_sync(sys.stdin.readline))
    limiter = None
    if mode == "limiter":
        # the clock every process reads is stopped at the start: the k-th slot taken
        # (in Redis' order, across the processes) is k * 0.5 s from the start, however
        # late it was asked for; each turn still waits that long in real time.
        # max_wait ends the run a quarter-interval past SECONDS (not at it: the wait is
        # counted from when the turn asked, a moment before it reserved)
        limiter = RateLimiter(
            requests_per_minute=120, store=store, max_wait=seconds + 0.25, clock=lambda: start
        )
    plugins: list[Any] = []
    if mode == "budget":
        plugins = [Budget(usd=usd, store=store)]
    elif mode == "cache":
        plugins = [ResponseCache(store=store)]
    client = CucaClient(
        ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key="k",
        rate_limiter=limiter, plugins=plugins,
    )
    await trio.sleep(max(0.0, start - time.time()))
    sent, cached, refused = 0, 0, False
    async with client:
        if mode == "limiter":

            async def turns() -> None:
                nonlocal sent
                while True:
                    try:
                        await client.generate(REQUEST)
                    except RateLimitExceeded:
                        return  # the next slot is past the end of the run
                    sent += 1

            # turns in flight at once, each waiting for its slot: the run lasts about
            # SECONDS (one at a time, each turn's wait would count from its last end)
            async with trio.open_nursery() as nursery:
                for _ in range(IN_FLIGHT):
                    nursery.start_soon(turns)
        elif mode == "budget":
            while not refused:
                try:
                    await client.generate(REQUEST)
                    sent += 1
                except BudgetExceeded:
                    refused = True
        else:
            completion = await client.generate(REQUEST)
            sent, cached = 1, int(completion.response.cached)
    await store.aclose()
    print(json.dumps({"sent": sent, "cached": cached, "refused": refused, "start": start}))


if __name__ == "__main__":
    mode, redis_url, url, seconds = sys.argv[1:5]
    usd = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    trio.run(main, mode, redis_url, url, float(seconds), usd)
