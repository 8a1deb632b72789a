"""The Redis store: many processes on many machines, through the ``redis`` client.

Every call runs the synchronous client in a worker thread (``trio.to_thread``; the
library's asyncio client does not run under trio). An update is the library's own
optimistic transaction: ``WATCH`` the key, read it, ``MULTI``/``SET``/``EXEC``, retried
when another client changed the key meanwhile. Socket timeouts bound every call
(connecting and each reply; a call is tried twice), so a stopped or hung server is a
:class:`~cuca.errors.StoreError` within a few times ``timeout``, never a hang. A
cancelled caller abandons a read or a write, but waits for an update to answer (within
the same bound): the server may have applied it, and the caller must learn what it
took (a concurrency slot, a reservation) to give it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from cuca.errors import StoreError

from .base import Change, decode, encode

if TYPE_CHECKING:
    import redis as redis_lib

__all__ = ["RedisStore"]

R = TypeVar("R")


class RedisStore:
    """A store on the Redis server at ``url`` (``redis://host:port/db``), or on a
    ``redis.Redis`` client you built (``client=``). ``timeout`` (seconds) bounds
    connecting and every reply."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: redis_lib.Redis | None = None,
        timeout: float = 2.0,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self._client = client

    def _redis(self) -> redis_lib.Redis:
        if self._client is None:
            import redis as redis_lib
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            self._client = redis_lib.Redis.from_url(
                self.url,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 1),
            )
        return self._client

    async def _run(self, work: Callable[[redis_lib.Redis], R], abandon: bool = True) -> R:
        import redis as redis_lib

        def call() -> R:
            try:
                return work(self._redis())
            except redis_lib.RedisError as exc:
                raise StoreError(f"redis {_safe(self.url)}: {type(exc).__name__}: {exc}") from None

        return await trio.to_thread.run_sync(call, abandon_on_cancel=abandon)

    async def get(self, key: str) -> Any:
        return decode(await self._run(lambda r: r.get(key)))

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        data = encode(value)
        await self._run(lambda r: r.set(key, data, px=_ms(ttl)))

    async def delete(self, key: str) -> None:
        await self._run(lambda r: r.delete(key))

    async def update(self, key: str, change: Change[R], ttl: float | None = None) -> R:
        def work(client: redis_lib.Redis) -> R:
            def attempt(pipe: Any) -> R:
                new, result = change(decode(pipe.get(key)))
                pipe.multi()
                if new is None:
                    pipe.delete(key)
                else:
                    pipe.set(key, encode(new), px=_ms(ttl))
                return result

            transaction: Any = client.transaction  # typed as returning the pipeline's replies
            result: R = transaction(attempt, key, value_from_callable=True)
            return result

        return await self._run(work, abandon=False)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await trio.to_thread.run_sync(client.close)

    def __repr__(self) -> str:
        return f"RedisStore({_safe(self.url)!r})"


def _ms(ttl: float | None) -> int | None:
    return None if ttl is None else max(1, int(ttl * 1000))


def _safe(url: str) -> str:
    """``url`` without a password."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}"
