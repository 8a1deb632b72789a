"""What ``RedisStore`` promises beyond the store interface (tests/test_store.py): its
defaults, expiries in the server's milliseconds, and errors that never show a password.
A real ``redis-server`` on loopback, started by the test (support/stores.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis
import trio
from support.stores import free_port, redis_server

from cuca import StoreError
from cuca.store import RedisStore


def test_store_redis_defaults_are_the_documented_ones() -> None:
    """docs/limits.md: ``RedisStore(url)``, ``RedisStore(timeout=2.0)``."""
    store = RedisStore()
    assert repr(store) == "RedisStore('redis://127.0.0.1:6379/0')"
    assert store.timeout == 2.0


async def test_store_redis_errors_and_repr_never_show_the_password() -> None:
    port = free_port()  # nobody listens: refused at once
    store = RedisStore(f"redis://cuca:s3@cret@127.0.0.1:{port}/0", timeout=1.0)
    assert repr(store) == f"RedisStore('redis://127.0.0.1:{port}/0')"
    with pytest.raises(StoreError) as caught:
        await store.get("k")
    message = str(caught.value)
    assert message.startswith(f"store error: redis redis://127.0.0.1:{port}/0: ConnectionError: ")
    assert "s3" not in message and "cret" not in message and "cuca" not in message
    await store.aclose()


async def test_store_redis_uses_the_client_it_is_given(tmp_path: Path) -> None:
    with redis_server(tmp_path) as server:
        client = redis.Redis.from_url(server.url)
        store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", client=client)  # not used
        try:
            await store.set("k", {"a": 1})
            assert client.get("k") == b'{"a":1}'
            assert await store.get("k") == {"a": 1}
        finally:
            await store.aclose()


async def test_store_redis_ttl_reaches_the_server_in_milliseconds(tmp_path: Path) -> None:
    """A value set or updated with ``ttl`` seconds expires at the server ``ttl`` seconds
    later (its PTTL, never more); a ttl under a millisecond is one (Redis refuses 0)."""
    with redis_server(tmp_path) as server:
        store = RedisStore(server.url)
        direct = redis.Redis.from_url(server.url)
        try:
            await store.set("set", 1, ttl=30)
            assert 20_000 < direct.pttl("set") <= 30_000
            await store.update("updated", lambda old: (2, None), ttl=30.5)
            assert 20_000 < direct.pttl("updated") <= 30_500
            await store.set("kept", 3)
            assert direct.pttl("kept") == -1  # no expiry
            await store.set("brief", 4, ttl=0.0001)
            assert direct.pttl("brief") <= 1  # 1 ms, or already gone (-2)
        finally:
            direct.close()
            await store.aclose()


async def test_store_redis_aclose_releases_the_connections_and_can_be_reused(
    tmp_path: Path,
) -> None:
    with redis_server(tmp_path) as server:
        store = RedisStore(server.url)
        direct = redis.Redis.from_url(server.url)
        try:
            await store.set("k", 1)
            before = len(direct.client_list())
            await store.aclose()
            assert len(direct.client_list()) == before - 1
            await store.aclose()  # a second close is no error
            assert await store.get("k") == 1  # a new connection
        finally:
            direct.close()
            await store.aclose()


async def test_store_redis_cancelled_read_is_abandoned_not_waited_for() -> None:
    """docs: a cancelled caller abandons a read or a write (only an update waits for
    its answer). Against a server that accepts and never answers, with an hour's
    timeout, the cancelled read comes back once cancelled."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # the kernel accepts; nobody ever reads or answers
    port = listener.getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0", timeout=3600)
    try:
        with trio.fail_after(30):  # a guard against a hang, not a measure
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.get, "k")
                await trio.lowlevel.wait_readable(listener)  # the read has connected
                nursery.cancel_scope.cancel()
        assert nursery.cancel_scope.cancelled_caught
    finally:
        listener.close()  # resets the connection: the abandoned thread ends
        await store.aclose()
