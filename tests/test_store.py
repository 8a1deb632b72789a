"""The store interface: the same behaviour in memory, in SQLite and in Redis (a real
redis-server on loopback), and a store that fails is a StoreError, never a hang."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from support.stores import STORES, open_store, redis_server

from cuca import StoreError
from cuca.store import RedisStore, SqliteStore, Store


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    with open_store(request.param, tmp_path) as opened:
        yield opened
        await opened.aclose()


async def test_store_get_set_delete(store: Store) -> None:
    assert await store.get("a") is None
    await store.set("a", {"x": [1, 2.5, "three"], "y": None})
    assert await store.get("a") == {"x": [1, 2.5, "three"], "y": None}
    await store.delete("a")
    await store.delete("a")  # absent: no error
    assert await store.get("a") is None


async def test_store_ttl_expires(store: Store) -> None:
    await store.set("short", 1, ttl=0.05)
    await store.set("long", 2, ttl=60)
    await trio.sleep(0.2)
    assert await store.get("short") is None
    assert await store.get("long") == 2


async def test_store_update_returns_result_and_stores_new(store: Store) -> None:
    def bump(old: Any) -> tuple[Any, int]:
        value = (old or 0) + 1
        return value, value * 10

    assert await store.update("n", bump) == 10
    assert await store.update("n", bump) == 20
    assert await store.get("n") == 2
    assert await store.update("n", lambda old: (None, "gone")) == "gone"
    assert await store.get("n") is None


async def test_store_concurrent_updates_lose_nothing(store: Store) -> None:
    async def bump_many() -> None:
        for _ in range(25):
            await store.update("count", lambda old: ((old or 0) + 1, None))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(bump_many)
    assert await store.get("count") == 100


async def test_store_refuses_a_value_that_is_not_json(store: Store) -> None:
    with pytest.raises(StoreError, match="not JSON"):
        await store.set("bad", object())


async def test_store_redis_stopped_mid_run_is_a_store_error(tmp_path: Path) -> None:
    with redis_server(tmp_path) as server:
        store = RedisStore(server.url, timeout=1.0)
        await store.set("k", 1)
        server.stop()
        with trio.fail_after(5):  # never a hang
            with pytest.raises(StoreError, match="redis"):
                await store.get("k")
            with pytest.raises(StoreError):
                await store.update("k", lambda old: (old, None))
        await store.aclose()


async def test_store_sqlite_unwritable_is_a_store_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "missing-dir" / "cuca.db")
    with pytest.raises(StoreError, match="sqlite"):
        await store.set("k", 1)


async def test_store_sqlite_is_shared_by_two_instances(tmp_path: Path) -> None:
    first, second = SqliteStore(tmp_path / "db"), SqliteStore(tmp_path / "db")
    await first.set("k", "v")
    assert await second.get("k") == "v"
    await first.aclose()
    await second.aclose()
