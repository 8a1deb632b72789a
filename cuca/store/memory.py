"""The in-memory store: one process, no I/O; the default of every feature."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from .base import Change, decode, encode

__all__ = ["MemoryStore"]

R = TypeVar("R")


class MemoryStore:
    """A dict of JSON values with expiry. Shared by the features given the same instance
    in one process; trio runs one task at a time, so an update needs no lock. Values
    are kept encoded, so a caller never shares a mutable value with the store."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[bytes, float | None]] = {}

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
        expires = None if ttl is None else time.time() + ttl
        self._data[key] = (encode(value), expires)

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
