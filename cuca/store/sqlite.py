"""The SQLite store: one machine, many processes, through one database file.

The standard library's ``sqlite3`` in WAL mode (readers never wait for the writer),
every call in a worker thread (``trio.to_thread``) so the event loop never waits on the
disk, and every update in a ``BEGIN IMMEDIATE`` transaction: the write lock is taken
before the read, so two processes' updates of one key never interleave.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import trio

from cuca.errors import StoreError

from .base import Change, decode, encode

__all__ = ["SqliteStore"]

R = TypeVar("R")

_SCHEMA = "CREATE TABLE IF NOT EXISTS cuca_store (key TEXT PRIMARY KEY, value BLOB, expires REAL)"
_INDEX = "CREATE INDEX IF NOT EXISTS cuca_store_expires ON cuca_store (expires)"

SWEEP_EVERY = 1024
"""``set`` calls of one store between two deletions of the expired rows (a cache's
entries, which ``set`` writes: one never read again would otherwise stay for ever)."""


class SqliteStore:
    """A store in the SQLite file at ``path`` (created when missing). ``busy_timeout``
    is how long, in seconds, a call waits for another process's write lock before it
    fails with :class:`~cuca.errors.StoreError`."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 5.0) -> None:
        self.path = str(path)
        self.busy_timeout = busy_timeout
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._writes = 0  # since the last deletion of expired rows

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            connection = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None,
                check_same_thread=False,
            )
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(_SCHEMA)
            connection.execute(_INDEX)
            self._connection = connection
        return self._connection

    async def _run(self, work: Callable[[sqlite3.Connection], R]) -> R:
        def call() -> R:
            with self._lock:
                try:
                    return work(self._connect())
                except sqlite3.Error as exc:
                    raise StoreError(f"sqlite {self.path}: {type(exc).__name__}: {exc}") from None

        return await trio.to_thread.run_sync(call)

    async def get(self, key: str) -> Any:
        def work(db: sqlite3.Connection) -> Any:
            return _read(db, key, time.time())

        return await self._run(work)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        data = encode(value)

        def work(db: sqlite3.Connection) -> None:
            _write(db, key, data, ttl)
            self._writes += 1
            if self._writes >= SWEEP_EVERY:
                self._writes = 0
                db.execute("DELETE FROM cuca_store WHERE expires <= ?", (time.time(),))

        await self._run(work)

    async def delete(self, key: str) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM cuca_store WHERE key = ?", (key,))

        await self._run(work)

    async def update(self, key: str, change: Change[R], ttl: float | None = None) -> R:
        def work(db: sqlite3.Connection) -> R:
            db.execute("BEGIN IMMEDIATE")
            try:
                new, result = change(_read(db, key, time.time()))
                if new is None:
                    db.execute("DELETE FROM cuca_store WHERE key = ?", (key,))
                else:
                    _write(db, key, encode(new), ttl)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        return await self._run(work)

    async def aclose(self) -> None:
        def close() -> None:
            with self._lock:
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None

        await trio.to_thread.run_sync(close)

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"


def _read(db: sqlite3.Connection, key: str, now: float) -> Any:
    row = db.execute("SELECT value, expires FROM cuca_store WHERE key = ?", (key,)).fetchone()
    if row is None or (row[1] is not None and row[1] <= now):
        return None
    return decode(row[0])


def _write(db: sqlite3.Connection, key: str, data: bytes, ttl: float | None) -> None:
    expires = None if ttl is None else time.time() + ttl
    db.execute(
        "INSERT INTO cuca_store (key, value, expires) VALUES (?, ?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value, expires = excluded.expires",
        (key, data, expires),
    )
