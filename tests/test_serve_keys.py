"""Each client key's own rate limit and budget (issue 34 §4), shared by two replicas of
the server through one real ``redis-server`` on loopback, as two machines behind one
address would share it: what one key spends through one replica is refused on the
other, and another key is not touched. The clocks are frozen (``clock``): no verdict
depends on how fast the machine is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import trio
from support.serve_backends import ScriptedBackend
from support.stores import redis_server

from cuca.errors import ConfigurationError
from cuca.serve import Backend, KeyLimits, ServeApp, serve
from cuca.store import RedisStore
from cuca.types import Text, TokenUsage

KEYS = ["alice-key-0123456789", "bob-key-9876543210"]
FROZEN = {"clock": lambda: 1_800_000_000.0}
WAIT = 30  # seconds: a hang fails the test, no verdict depends on it


@asynccontextmanager
async def replicas(url: str, **limits: Any) -> AsyncIterator[tuple[str, str]]:
    """Two servers, each with its own KeyLimits over the one Redis (as two processes
    would build them), serving a scripted backend whose turns use 60 + 30 tokens."""
    backend = ScriptedBackend([[Text("ok")]], usage=TokenUsage(60, 30))
    async with trio.open_nursery() as nursery:
        urls = []
        for _ in range(2):
            app = ServeApp(
                {"m": Backend(backend)},
                api_keys=KEYS,
                key_limits=KeyLimits(store=RedisStore(url), **limits),
            )
            urls.append(await nursery.start(serve, app, "127.0.0.1", 0))
        yield urls[0], urls[1]
        nursery.cancel_scope.cancel()


def chat(key: str) -> dict[str, Any]:
    return {
        "json": {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]},
        "headers": {"authorization": f"Bearer {key}"},
    }


def messages(key: str) -> dict[str, Any]:
    body = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    return {"json": body, "headers": {"x-api-key": key, "anthropic-version": "2023-06-01"}}


async def test_serve_keys_budget_spent_through_one_replica_is_refused_on_the_other(
    tmp_path: Path,
) -> None:
    """What the user sees: alice's budget (100 tokens) is spent by one 90-token turn on
    replica A; her next turn, on replica B, is a 429 in the wire's envelope naming the
    budget; bob, on B, is answered. Redis holds neither key, only digests."""
    alice, bob = KEYS
    with redis_server(tmp_path) as server:
        budget = {"tokens": 100, **FROZEN}
        async with (
            replicas(server.url, budget=budget) as (a, b),
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            first = await http.post(f"{a}/v1/chat/completions", **chat(alice))
            assert first.status_code == 200
            refused = await http.post(f"{b}/v1/messages", **messages(alice))
            assert refused.status_code == 429
            assert refused.json()["error"]["type"] == "rate_limit_error"
            assert "tokens" in refused.json()["error"]["message"]
            again = await http.post(f"{a}/v1/chat/completions", **chat(alice))
            assert again.status_code == 429
            assert again.json()["error"]["type"] == "rate_limit_exceeded"
            other = await http.post(f"{b}/v1/chat/completions", **chat(bob))
            assert other.status_code == 200
            assert other.json()["choices"][0]["message"]["content"] == "ok"
        stored = redis.Redis.from_url(server.url).keys("*")
        assert stored and all(b"cuca:serve:key:" in k for k in stored)
        assert not any(alice.encode() in k or bob.encode() in k for k in stored)


async def test_serve_keys_rate_limit_is_each_keys_own_across_replicas(tmp_path: Path) -> None:
    """One request a minute per key, no waiting: alice's second request, on the other
    replica, is refused (429); bob's first is answered on either."""
    alice, bob = KEYS
    with redis_server(tmp_path) as server:
        limit = {"requests_per_minute": 1, "max_wait": 0, **FROZEN}
        async with (
            replicas(server.url, rate_limit=limit) as (a, b),
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            assert (await http.post(f"{a}/v1/chat/completions", **chat(alice))).is_success
            refused = await http.post(f"{b}/v1/chat/completions", **chat(alice))
            assert refused.status_code == 429
            assert refused.json()["error"]["type"] == "rate_limit_exceeded"
            assert (await http.post(f"{b}/v1/messages", **messages(bob))).is_success


def test_serve_keys_limits_refuse_a_wrong_setting_when_built() -> None:
    with pytest.raises(ConfigurationError, match=r"keys\.budget: .*dollars"):
        KeyLimits(budget={"dollars": 5})
    with pytest.raises(ConfigurationError, match=r"keys\.rate_limit: max_concurrent"):
        KeyLimits(rate_limit={"max_concurrent": -1})
