"""The store interface: JSON values under string keys, with an expiry, and one atomic
read-modify-write.

Features keep their arithmetic in pure functions (:data:`Change`) and hand them to
:meth:`Store.update`, so the same rule runs, atomically, in memory, in SQLite (an
immediate transaction) and in Redis (``WATCH``/``MULTI``, retried on a conflict).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import msgspec

from cuca.errors import StoreError

__all__ = ["Change", "Store", "decode", "encode"]

R = TypeVar("R")

Change = Callable[[Any], tuple[Any, R]]
"""``change(old) -> (new, result)``: ``old`` is the stored value or ``None``; ``new`` is
stored (``None`` deletes the key) and ``result`` returned to the caller. It must be
pure, with no side effect: a store may call it again when another process changed the
key meanwhile (Redis)."""


@runtime_checkable
class Store(Protocol):
    """Where a feature keeps state beyond one turn. ``ttl`` is in seconds (``None``:
    kept until deleted). Every method raises :class:`~cuca.errors.StoreError` when the
    store fails."""

    async def get(self, key: str) -> Any:
        """The value under ``key``, or ``None`` (absent or expired)."""
        ...

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        """Store ``value`` (JSON) under ``key``."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key`` (absent is not an error)."""
        ...

    async def update(self, key: str, change: Change[R], ttl: float | None = None) -> R:
        """Apply ``change`` to the value under ``key`` atomically; the new value expires
        ``ttl`` seconds from now."""
        ...

    async def aclose(self) -> None:
        """Release the store's connections."""
        ...


def encode(value: Any) -> bytes:
    """A value as stored: compact JSON."""
    try:
        return msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise StoreError(f"a value that is not JSON: {exc}") from None


def decode(data: bytes | str | None) -> Any:
    """A stored value back (``None`` for a missing one)."""
    if data is None:
        return None
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise StoreError(f"a stored value is not JSON: {exc}") from None
