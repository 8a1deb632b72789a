"""The three stores for tests: in memory, a SQLite file, and a real ``redis-server`` on a
free loopback port (persistence off), started and stopped by the test."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cuca.store import MemoryStore, RedisStore, SqliteStore, Store

STORES = ("memory", "sqlite", "redis")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A running ``redis-server``: ``url``, and ``stop()`` to end it mid-test."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    """``redis-server`` on a free loopback port, no RDB snapshots, no AOF (``make
    install-test`` installs Debian's package when it is missing)."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is missing: run `make install-test` (it installs it)"
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory), "--protected-mode", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    server = RedisServer(process, port)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)
        yield server
    finally:
        server.stop()


@contextmanager
def open_store(name: str, directory: Path) -> Iterator[Store]:
    """A fresh store of kind ``name`` (one of :data:`STORES`)."""
    if name == "memory":
        yield MemoryStore()
    elif name == "sqlite":
        yield SqliteStore(directory / "cuca.db")
    else:
        with redis_server(directory) as server:
            yield RedisStore(server.url)
