"""Each client key's own rate limit and budget (issue 34 §4).

A server with several keys (``--api-key``, repeatable) gives each its own
:class:`~cuca.RateLimiter` and :class:`~cuca.Budget`, built from the same settings and
kept in one store under the key's digest (never the key itself): spending through one
key does not touch another's. With a :class:`~cuca.store.RedisStore`, replicas of the
server behind one address share each key's state, so a key's budget spent through one
replica is refused on every other. A turn meets these gates as a client's turn meets
its own (:class:`~cuca.admission.Admission`): admitted before its request goes out,
settled with its usage when it ends, however it ends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from cuca.errors import ConfigurationError

if TYPE_CHECKING:
    from cuca.admission import TurnGate
    from cuca.store import Store

__all__ = ["KeyLimits", "key_id"]


def key_id(key: bytes) -> str:
    """The name a key's state is kept under: a digest, so that the store (a Redis other
    people read) never holds a key. The server without keys has one identity, ``open``."""
    return hashlib.sha256(key).hexdigest()[:24] if key else "open"


@attrs.frozen
class KeyLimits:
    """The gates every client key gets, each its own: ``rate_limit`` (the keyword
    arguments of :class:`~cuca.RateLimiter`) and ``budget`` (those of
    :class:`~cuca.Budget`), kept in ``store`` (one shared by the replicas: a
    :class:`~cuca.store.RedisStore`; memory, this process only, by default) under
    ``prefix`` and the key's digest. A wrong setting is a
    :class:`~cuca.errors.ConfigurationError` naming it, when the server is built."""

    rate_limit: Mapping[str, Any] | None = None
    budget: Mapping[str, Any] | None = None
    store: Store | None = None
    prefix: str = "cuca:serve:key"
    _gates: dict[str, tuple[TurnGate, ...]] = attrs.field(
        factory=dict, init=False, repr=False, eq=False
    )

    def __attrs_post_init__(self) -> None:
        if self.store is None:
            from cuca.store import MemoryStore

            object.__setattr__(self, "store", MemoryStore())
        self._build("check")  # a wrong setting fails now, not on a client's turn

    def _build(self, ident: str) -> tuple[TurnGate, ...]:
        from cuca.limits import Budget, RateLimiter

        gates: list[TurnGate] = []
        for name, kind, settings in (
            ("rate_limit", RateLimiter, self.rate_limit),
            ("budget", Budget, self.budget),
        ):
            if settings is None:
                continue
            own = {**settings, "store": self.store, "key": f"{self.prefix}:{ident}:{name}"}
            try:
                gates.append(kind(**own))
            except (TypeError, ValueError, ConfigurationError) as exc:
                said = exc.args[0] if exc.args else exc
                raise ConfigurationError(f"keys.{name}: {said}") from None
        return tuple(gates)

    def gates(self, key: bytes) -> tuple[TurnGate, ...]:
        """The gates of ``key`` (the same objects on every turn of this process: a
        limiter's waiters and concurrency are counted in it)."""
        ident = key_id(key)
        found = self._gates.get(ident)
        if found is None:
            found = self._gates[ident] = self._build(ident)
        return found
