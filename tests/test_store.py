"""The store interface: the same behaviour in memory, in SQLite and in Redis (a real
redis-server on loopback), and a store that fails is a StoreError, never a hang."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from support.stores import STORES, open_store, redis_server
from support.transcripts import transcript
from trio.testing import MockClock

from cuca import (
    Budget,
    BudgetExceeded,
    CucaClient,
    ProviderEndpoint,
    RateLimiter,
    ResponseCache,
    StoreError,
    UnifiedRequest,
)
from cuca.providers.ratelimit import rate_limit_hint
from cuca.store import RedisStore, SqliteStore, Store
from cuca.testing import Reply, open_replay_server
from cuca.turn import RateLimitHint

OPENAI = ProviderEndpoint.OPENAI


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


# -- the features on each store ----------------------------------------------------------

REQUEST = (
    UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64).set_temperature(0)
)


async def test_store_rate_limiter_spaces_turns_on_each_store(store: Store) -> None:
    limiter = RateLimiter(requests_per_minute=600, max_concurrent=2, store=store)
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", rate_limiter=limiter) as c:
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(c.generate, REQUEST)
            took = trio.current_time() - start
    assert len(server.requests) == 4 and took >= 0.3
    state = await store.get(limiter.key)
    assert state["l"] == {}  # every concurrency slot given back


def read(headers: list[tuple[str, str]]) -> RateLimitHint:
    """What the backend's adapter reads in an answer's headers, for the limiter."""
    hint = rate_limit_hint(headers)
    assert hint is not None
    return hint


async def test_store_server_pacing_and_pause_reach_another_limiter(
    store: Store, autojump_clock: MockClock
) -> None:
    """What one limiter heard from the server (2 requests left until a reset in 4 s,
    then a Retry-After of 3 s) holds the turns of another sharing its store (another
    process's, in production): spaced 2 s apart, the third at the reset, then paused."""
    heard = RateLimiter(store=store, key="pace", clock=trio.current_time)
    other = RateLimiter(store=store, key="pace", clock=trio.current_time)
    start = trio.current_time()
    await heard.steer(read([("x-ratelimit-remaining-requests", "2"),
                            ("x-ratelimit-reset-requests", "4s")]))
    admitted = []
    for _ in range(3):
        await other.admit(REQUEST)
        admitted.append(trio.current_time() - start)
    assert admitted == pytest.approx([0.0, 2.0, 4.0], abs=0.01)
    await heard.steer(read([("retry-after", "3")]))
    await other.admit(REQUEST)
    assert trio.current_time() - start == pytest.approx(7.0, abs=0.01)


async def test_store_budget_reservations_on_each_store(store: Store) -> None:
    budget = Budget(tokens=4 * 73 + 10, store=store)  # 4 projections of 9 + 64 tokens
    refused = 0
    slow = Reply(transcript("openai/text"), chunks=(256,) * 8, delay=0.02)
    async with open_replay_server(slow) as server:
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", plugins=[budget]) as c:

            async def turn() -> None:
                nonlocal refused
                try:
                    await c.generate(REQUEST)
                except BudgetExceeded:
                    refused += 1

            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(turn)
    assert (len(server.requests), refused) == (4, 4)
    assert (await budget.spent())["tokens"] == 4 * (1117 + 46)


async def test_store_cache_hits_on_each_store(store: Store) -> None:
    cache = ResponseCache(store=store, max_entries=5)
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", plugins=[cache]) as c:
            first = await c.generate(REQUEST)
            second = await c.generate(REQUEST)
    assert second.response.cached and second.blocks == first.blocks
    assert len(server.requests) == 1




class SlowUpdates:
    """A store whose updates take 0.3 s in their worker thread (a slow disk, a slow
    network): ``started`` is set when one has begun."""

    def __init__(self, store: Store) -> None:
        import threading

        self.store = store
        self.started = threading.Event()

    async def get(self, key: str) -> Any:
        return await self.store.get(key)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        await self.store.set(key, value, ttl)

    async def delete(self, key: str) -> None:
        await self.store.delete(key)

    async def update(self, key: str, change: Any, ttl: float | None = None) -> Any:
        import time

        def slow(old: Any) -> Any:
            self.started.set()
            time.sleep(0.3)
            return change(old)

        return await self.store.update(key, slow, ttl)

    async def aclose(self) -> None:
        await self.store.aclose()


@pytest.mark.parametrize("name", ["sqlite", "redis"])
async def test_store_turn_cancelled_during_its_update_leaks_no_slot(
    name: str, tmp_path: Path
) -> None:
    """A turn cancelled while the store is taking its concurrency slot: the update
    still lands (the disk or the server got it), so the turn must learn of it and give
    the slot back; a slot kept by nobody would hold every turn of every process
    sharing the store for lease_ttl (600 s)."""
    with open_store(name, tmp_path) as opened:
        store = SlowUpdates(opened)
        limiter = RateLimiter(max_concurrent=1, store=store)
        async with open_replay_server(Reply(transcript("openai/text"))) as replay:
            async with CucaClient(OPENAI, base_url=f"{replay.url}/v1",
                                  rate_limiter=limiter) as c:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(c.generate, REQUEST)
                    while not store.started.is_set():
                        await trio.sleep(0.005)
                    nursery.cancel_scope.cancel()  # while its slot is being taken
                # the slot comes back once the update on its way has landed and been
                # undone: wait for that (a slot kept by nobody never comes back)
                with trio.move_on_after(60):
                    while (state := await store.get(limiter.key)) is None or state["l"]:
                        await trio.sleep(0.01)
                assert state is not None and state["l"] == {}, (
                    f"a cancelled turn's slot was never given back: {state}"
                )
                with trio.fail_after(60):  # a guard against a hang, not a measure
                    await c.generate(REQUEST)  # the one slot is free
        await store.aclose()


async def test_store_turn_cancelled_during_its_budget_reservation_is_charged_nothing(
    tmp_path: Path,
) -> None:
    """The same for a Budget: the reservation that landed after the turn was cancelled
    is taken back, and nothing is charged (the request was never sent)."""
    store = SlowUpdates(SqliteStore(tmp_path / "cuca.db"))
    budget = Budget(tokens=10_000, store=store)
    async with open_replay_server(Reply(transcript("openai/text"))) as replay:
        async with CucaClient(OPENAI, base_url=f"{replay.url}/v1", plugins=[budget]) as c:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(c.generate, REQUEST)
                while not store.started.is_set():
                    await trio.sleep(0.005)
                nursery.cancel_scope.cancel()  # while its reservation is being made
    state = await store.get(budget.key)
    assert state is not None and state["held"] == {}, f"a reservation was left: {state}"
    assert (await budget.spent())["tokens"] == 0
    assert len(replay.requests) == 0
    await store.aclose()


async def test_store_redis_that_never_answers_is_a_store_error_not_a_hang() -> None:
    """A Redis that accepts connections and never answers (a hung server, not a
    stopped one): every call, updates included, fails with the socket timeout after two
    tries (a connection each: the listener counts them), so within a few times the
    timeout, never a hang. Counted, not timed: a busy machine stretches the wait."""
    import contextlib
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # the kernel accepts; nobody ever reads or answers
    port = listener.getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0", timeout=0.3)
    try:
        with trio.fail_after(30):  # a guard against a hang, not a measure
            with pytest.raises(StoreError, match="Timeout"):
                await store.get("k")
            with pytest.raises(StoreError, match="Timeout"):
                await store.update("k", lambda old: (1, None))
        listener.setblocking(False)
        connections = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                listener.accept()[0].close()
                connections += 1
        assert connections == 4  # each call tried twice, each try ended by the timeout
    finally:
        await store.aclose()
        listener.close()


@pytest.mark.parametrize("name", ["memory", "sqlite"])
async def test_store_expired_entries_never_read_again_are_dropped(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache with a ttl keeps writing entries nobody reads again: the expired ones
    go, so the process's memory (or the SQLite file) does not grow for ever."""
    import sqlite3

    from cuca.store import memory, sqlite

    monkeypatch.setattr(memory, "SWEEP_EVERY", 16)
    monkeypatch.setattr(sqlite, "SWEEP_EVERY", 16)
    with open_store(name, tmp_path) as store:
        for round_ in range(10):  # 400 entries written, 40 live at a time
            for n in range(40):
                await store.set(f"{round_}:{n}", n, ttl=0.03)
            await trio.sleep(0.04)
        await store.set("new", 0, ttl=60)
        if isinstance(store, SqliteStore):
            with sqlite3.connect(store.path) as db:
                (kept,) = db.execute("SELECT count(*) FROM cuca_store").fetchone()
        else:
            kept = len(store._data)  # type: ignore[attr-defined]
        assert kept <= 100, f"{kept} of the 401 entries written are kept, 1 of them live"
        assert await store.get("new") == 0
        await store.aclose()


async def test_store_sqlite_update_holds_the_write_lock_from_its_read(tmp_path: Path) -> None:
    """docs/limits.md: an update is one ``BEGIN IMMEDIATE`` transaction, so while one
    process's update sits between its read and its write no other process can start a
    write (it waits, up to its busy timeout): two processes' updates never interleave.
    A plain ``BEGIN`` takes the lock only at the write, and the process that read first
    then fails with "database is locked" when the other wrote meanwhile."""
    import sqlite3

    path = tmp_path / "shared.db"
    store = SqliteStore(path)
    other_writer: list[str] = []

    def change(old: Any) -> tuple[int, int]:
        # another process, mid-update, asks for the write lock without waiting
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            other_writer.append("got in")
        except sqlite3.OperationalError as exc:
            other_writer.append(str(exc))
        finally:
            other.close()
        return (old or 0) + 1, (old or 0) + 1

    try:
        assert await store.update("turns", change) == 1
        assert await store.update("turns", change) == 2
    finally:
        await store.aclose()
    assert other_writer == ["database is locked", "database is locked"]


async def test_store_update_whose_change_raises_changes_nothing(store: Store) -> None:
    """An update is all or nothing: a change that raises leaves the value as it was,
    the error reaches the caller as itself, and the store goes on working."""
    await store.set("n", 1)

    def broken(old: Any) -> tuple[Any, None]:
        raise ValueError("not this time")

    with pytest.raises(ValueError, match="not this time"):
        await store.update("n", broken)
    assert await store.get("n") == 1
    assert await store.update("n", lambda old: (old + 1, old)) == 1
    assert await store.get("n") == 2


async def test_store_sqlite_keeps_its_file_in_wal_mode_and_names_it_in_errors(
    tmp_path: Path,
) -> None:
    """docs/limits.md: SQLite "in WAL mode" (readers never wait for the writer); a
    failure is a StoreError that names the file and SQLite's error; the repr names the
    file too."""
    import sqlite3

    path = tmp_path / "cuca.db"
    store = SqliteStore(path)
    await store.set("k", 1)
    await store.aclose()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert repr(store) == f"SqliteStore({str(path)!r})"
    missing = tmp_path / "missing-dir" / "cuca.db"
    with pytest.raises(StoreError) as caught:
        await SqliteStore(missing).get("k")
    assert str(caught.value) == (
        f"store error: sqlite {missing}: OperationalError: unable to open database file"
    )


async def test_store_sqlite_waits_for_another_writer_up_to_its_busy_timeout(
    tmp_path: Path,
) -> None:
    """``busy_timeout``: a call waits for another process's write lock, and fails with
    StoreError ("database is locked") only once that time has passed; the store works
    again once the lock is gone."""
    import sqlite3

    path = tmp_path / "cuca.db"
    store = SqliteStore(path, busy_timeout=0.01)
    await store.set("k", 1)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process, writing
    try:
        with pytest.raises(StoreError, match="database is locked"):
            await store.update("k", lambda old: (old + 1, None))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await store.update("k", lambda old: (old + 1, None))
    assert await store.get("k") == 2
    await store.aclose()


async def test_store_values_are_copies_and_an_update_keeps_its_ttl(store: Store) -> None:
    """A stored value is JSON, not the caller's object: changing the dict given to
    ``set``, or the one ``get`` returned, changes nothing stored; an update's ``ttl``
    makes the new value expire; storing ``None`` through an update deletes the key."""
    value = {"turns": [1, 2]}
    await store.set("v", value)
    value["turns"].append(3)
    got = await store.get("v")
    assert got == {"turns": [1, 2]}
    got["turns"].append(4)
    assert await store.get("v") == {"turns": [1, 2]}
    assert await store.update("short", lambda old: ("soon gone", old), ttl=0.05) is None
    assert await store.update("long", lambda old: ("kept", old), ttl=60) is None
    await trio.sleep(0.2)
    assert await store.get("short") is None and await store.get("long") == "kept"
    assert await store.update("long", lambda old: (None, old)) == "kept"
    assert await store.get("long") is None
    assert repr(store).startswith(type(store).__name__ + "(")


async def test_store_sqlite_sweeps_expired_rows_every_sweep_every_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SWEEP_EVERY``: the expired rows are deleted by every SWEEP_EVERY-th ``set`` of a
    store (here 3), not before, and the count starts again after each sweep; an expired
    row no one reads stays until then (a ``get`` never returns it). A store closed and
    used again opens its file again; its busy timeout is 5 s unless given."""
    import sqlite3

    from cuca.store import sqlite

    monkeypatch.setattr(sqlite, "SWEEP_EVERY", 3)
    path = tmp_path / "cuca.db"
    store = SqliteStore(path)
    assert store.busy_timeout == 5.0

    def rows() -> int:
        with sqlite3.connect(path) as db:
            (count,) = db.execute("SELECT count(*) FROM cuca_store").fetchone()
        db.close()
        return int(count)

    counts = []
    for round_ in range(3):  # sets 1-3, 4-6, 7-9: a sweep at the 3rd, 6th and 9th
        for n in range(3):
            if n == 2:
                await trio.sleep(0.05)  # the two before have expired
            await store.set(f"{round_}:{n}", n, ttl=0.01 if n < 2 else 60)
            counts.append(rows())
    assert counts == [1, 2, 1, 2, 3, 2, 3, 4, 3]
    assert await store.get("0:0") is None and await store.get("0:2") == 2
    await store.aclose()
    assert await store.get("2:2") == 2  # opened again
    await store.aclose()


class Clock:
    """A wall clock the test moves (the stores' times are ``time.time()``)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


async def test_store_memory_keeps_a_value_for_its_ttl_and_no_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ttl`` seconds after it was written a value is gone (read, it is dropped from
    memory), a moment before it is there; without a ttl it stays until deleted; an
    update's ttl counts from the update; storing ``None`` deletes the key."""
    from cuca.store import MemoryStore, memory

    clock = Clock(1000.0)
    monkeypatch.setattr(memory, "time", clock)
    store = MemoryStore()
    await store.set("a", 1, ttl=5)
    await store.set("kept", 2)
    clock.now = 1004.999
    assert await store.get("a") == 1
    clock.now = 1005.0
    assert await store.get("a") is None
    assert repr(store) == "MemoryStore(1 keys)"  # the expired value read is dropped
    assert await store.update("b", lambda old: (old or 10, old), ttl=5) is None
    clock.now = 1009.0
    assert await store.update("b", lambda old: (old + 1, old), ttl=5) == 10
    clock.now = 1013.0
    assert await store.get("b") == 11  # 4 s after the last update
    clock.now = 1e9
    assert await store.get("kept") == 2
    await store.set("kept", None)
    assert await store.get("kept") is None and await store.get("b") is None
    assert repr(store) == "MemoryStore(0 keys)"


async def test_store_memory_sweeps_expired_values_every_sweep_every_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SWEEP_EVERY``: the values expired (their ttl over, to the instant) that no one
    reads again are dropped by every SWEEP_EVERY-th write (here 3), not before, the
    count starting again after each sweep; with more live values than that, the next
    sweep waits as many writes as there are values (a write costs O(1), amortized). A
    value without a ttl is never swept."""
    from cuca.store import MemoryStore, memory

    clock = Clock(1000.0)
    monkeypatch.setattr(memory, "time", clock)
    monkeypatch.setattr(memory, "SWEEP_EVERY", 3)
    store = MemoryStore()

    def keys() -> int:
        return int(repr(store).removeprefix("MemoryStore(").removesuffix(" keys)"))

    counts = []
    for round_ in range(3):  # writes 1-3, 4-6, 7-9: a sweep at the 3rd, 6th and 9th
        for n in range(3):
            if n == 2:
                clock.now += 2  # the two before expire now
            await store.set(f"{round_}:{n}", n, ttl=2 if n < 2 else 60)
            counts.append(keys())
    assert counts == [1, 2, 1, 2, 3, 2, 3, 4, 3]
    # 3 live values: a sweep at the 3rd write from here (3 = max(SWEEP_EVERY, 3))
    await store.set("x", 0, ttl=2)
    clock.now += 2
    await store.set("y", 0, ttl=60)
    assert keys() == 5  # x expired, not swept yet
    await store.set("z", 0, ttl=60)
    assert keys() == 5  # swept: x gone, z in; now 5 live values
    for n in range(4):  # the next sweep after 5 writes, not 3
        await store.set(f"e{n}", n, ttl=2)
    clock.now += 2
    assert keys() == 9
    await store.set("w", 0, ttl=60)
    assert keys() == 6
    await store.set("forever", 0)  # 6 live values: a sweep at the 6th write
    for n in range(5):
        await store.set(f"f{n}", n, ttl=60)
    assert keys() == 12 and await store.get("forever") == 0
    await store.set("absent", None)  # None deletes: a key that was never there too
    assert await store.get("0:0") is None and await store.get("0:2") == 2
