"""One small store interface for what must outlive a turn or be shared between
processes: a rate limiter's windows, a budget's spending, a response cache's entries.

Three stores implement :class:`Store`: :class:`MemoryStore` (one process, the default),
:class:`SqliteStore` (one machine, many processes: a WAL database file) and
:class:`RedisStore` (many machines). Every value is JSON; every read-modify-write goes
through :meth:`Store.update`, atomic on each store. A failing store raises
:class:`~cuca.errors.StoreError`.
"""

from .base import Change, Store
from .memory import MemoryStore
from .redis import RedisStore
from .sqlite import SqliteStore

__all__ = ["Change", "MemoryStore", "RedisStore", "SqliteStore", "Store"]
