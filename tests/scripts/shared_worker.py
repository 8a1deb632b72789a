"""One process of the multi-process tests (``tests/test_shared.py``): runs turns against
a loopback server through a RateLimiter, a Budget or a ResponseCache whose state is in
Redis, and prints one JSON line of what it saw.

``shared_worker.py limiter|budget|cache REDIS_URL SERVER_URL START SECONDS [USD]``: the
turns start at wall-clock time START and stop SECONDS later (limiter), at the first
BudgetExceeded (budget), or after one turn (cache).
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

REQUEST = (
    UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64).set_temperature(0)
)


async def main(
    mode: str, redis_url: str, url: str, start: float, seconds: float, usd: float
) -> None:
    store = RedisStore(redis_url)
    limiter = RateLimiter(requests_per_minute=120, store=store) if mode == "limiter" else None
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
            assert limiter is not None
            while True:
                limiter.max_wait = max(0.0, start + seconds - time.time())
                try:
                    await client.generate(REQUEST)
                except RateLimitExceeded:
                    break  # the next slot is past the end of the run
                sent += 1
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
    print(json.dumps({"sent": sent, "cached": cached, "refused": refused}))


if __name__ == "__main__":
    mode, redis_url, url, start, seconds = sys.argv[1:6]
    usd = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    trio.run(main, mode, redis_url, url, float(start), float(seconds), usd)
