"""The in-memory store: one process, no I/O; the default of every feature."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from .base import Change, decode, encode

__all__ = ["MemoryStore"]

R = TypeVar("R")

SWEEP_EVERY = 1024
"""Writes between two sweeps of the expired entries (an entry never read again, a
cache's, would otherwise stay for the life of the process)."""


class MemoryStore:
    """A dict of JSON values with expiry. Shared by the features given the same instance
    in one process; trio runs one task at a time, so an update needs no lock. Values
    are kept encoded, so a caller never shares a mutable value with the store."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[bytes, float | None]] = {}
        self._writes = 0  # since the last sweep of expired entries
        self._sweep_at = SWEEP_EVERY  # writes before the next: the entries the last left

    def _read(self, key: str) -> Any:
        entry = self._data.get(key)
        if entry is None:
            return None
        data, expires = entry
        if expires is not None and expires <= time.time():
            del self._data[key]
            return None
        return decode(data)

    def _write(self, key: str, value: Any, ttl: float | None) -> None:
        if value is None:
            self._data.pop(key, None)
            return
        now = time.time()
        expires = None if ttl is None else now + ttl
        self._data[key] = (encode(value), expires)
        self._writes += 1
        if self._writes >= self._sweep_at:  # amortized: O(1) a write
            for stale in [k for k, (_, e) in self._data.items() if e is not None and e <= now]:
                del self._data[stale]
            self._writes, self._sweep_at = 0, max(SWEEP_EVERY, len(self._data))

    async def get(self, key: str) -> Any:
        return self._read(key)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        self._write(key, value, ttl)

    async def delete(self, key: str) -> None:
        self._data.pop(key, None)

    async def update(self, key: str, change: Change[R], ttl: float | None = None) -> R:
        new, result = change(self._read(key))
        self._write(key, new, ttl)
        return result

    async def aclose(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._data)} keys)"
