"""``ResponseCache``: a plugin that answers a turn it has seen before from the blocks it
kept, through the chunk hooks, as a live stream."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cuca._checks import kind
from cuca.admission import Replay
from cuca.convert import structure, to_json, unstructure
from cuca.errors import ConfigurationError, StoreError
from cuca.plugins import CucaPlugin
from cuca.recording import Recording, Run
from cuca.store import MemoryStore, Store
from cuca.types import Block, Text, Thinking, TurnSummary, UnifiedRequest

__all__ = ["ResponseCache", "cache_key"]


def cache_key(request: UnifiedRequest, endpoint: str | None) -> str:
    """The SHA-256 of the request's canonical JSON (keys sorted, no spaces; provider
    and model included) and the endpoint it goes to. The API key is no part of the
    request, so never of the key."""
    canonical = json.dumps(
        {"request": json.loads(to_json(request)), "endpoint": endpoint},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class ResponseCache(CucaPlugin):
    """Keeps each turn that ended cleanly and answers the same request again from it:
    the kept blocks go through the chunk hooks as a stream, the response has
    ``cached=True``, the kept usage, and costs 0. Nothing is sent.

    The key is :func:`cache_key` of the request after every ``on_request`` hook. A
    request whose ``temperature`` is not 0 (unset included: the server's default
    samples) is kept only with ``cache_sampled=True``, since two answers to it may
    legitimately differ. ``ttl``: seconds an entry lives; ``max_entries``: the oldest
    entries are dropped past it; ``store``: shared with other processes (in memory by
    default); ``fail_open=True``: a store that fails is a miss, not a
    :class:`~cuca.errors.StoreError`.
    """

    name = "response_cache"

    def __init__(
        self,
        ttl: float | None = None,
        max_entries: int | None = None,
        store: Store | None = None,
        *,
        cache_sampled: bool = False,
        fail_open: bool = False,
        prefix: str = "cuca:cache",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl is not None and (isinstance(ttl, bool) or not ttl > 0):
            raise ConfigurationError(f"ttl must be a positive number of seconds, not {ttl!r}")
        if max_entries is not None and (not isinstance(max_entries, int) or max_entries < 1):
            raise ConfigurationError(f"max_entries must be an integer >= 1, not {max_entries!r}")
        if store is not None and not isinstance(store, Store):
            raise ConfigurationError(f"store must be a cuca store, not {kind(store)}")
        self.ttl = ttl
        self.max_entries = max_entries
        self.store: Store = store if store is not None else MemoryStore()
        self.cache_sampled = cache_sampled
        self.fail_open = fail_open
        self.prefix = prefix
        self.clock = clock
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        shown = f"ttl={self.ttl}, max_entries={self.max_entries}, store={self.store!r}"
        return f"ResponseCache({shown})"

    def cacheable(self, request: UnifiedRequest) -> bool:
        """Whether turns of ``request`` are kept and answered."""
        return self.cache_sampled or request.temperature == 0

    async def lookup(self, request: UnifiedRequest, endpoint: str | None) -> Replay | None:
        """The kept turn for ``request``, or ``None``. An entry that holds no kept turn
        (another program's, under this prefix) is a store that failed: a
        :class:`~cuca.errors.StoreError`, or a miss with ``fail_open``."""
        if not self.cacheable(request):
            return None
        key = f"{self.prefix}:{cache_key(request, endpoint)}"
        try:
            entry = await self.store.get(key)
            kept = None if entry is None else _replay(key, entry)
        except StoreError:
            if not self.fail_open:
                raise
            kept = None
        if kept is None:
            self.misses += 1
            return None
        self.hits += 1
        return kept

    async def keep(self, request: UnifiedRequest, endpoint: str | None, replay: Replay) -> None:
        """Keep a turn that ended cleanly."""
        if not self.cacheable(request):
            return
        key = f"{self.prefix}:{cache_key(request, endpoint)}"
        entry = {"blocks": _to_entry(replay.blocks), "summary": unstructure(replay.summary)}
        try:
            await self.store.set(key, entry, self.ttl)
            if self.max_entries is not None:
                await self._evict(key)
        except StoreError:
            if not self.fail_open:
                raise

    async def get_entry(self, key: str) -> Any:
        """The entry kept under ``key`` (a full store key), or ``None``; counted as a
        hit or a miss. For what the cache keeps besides turns (embedding vectors)."""
        try:
            entry = await self.store.get(key)
        except StoreError:
            if not self.fail_open:
                raise
            entry = None
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    async def set_entry(self, key: str, entry: Any) -> None:
        """Keep ``entry`` (JSON data) under ``key``, with the cache's ``ttl`` and
        ``max_entries``."""
        try:
            await self.store.set(key, entry, self.ttl)
            if self.max_entries is not None:
                await self._evict(key)
        except StoreError:
            if not self.fail_open:
                raise

    async def _evict(self, key: str) -> None:
        """Record ``key`` in the index (oldest first) and drop what passes
        ``max_entries``."""
        limit, now, ttl = self.max_entries, self.clock(), self.ttl

        def change(old: Any) -> tuple[Any, list[str]]:
            index = [e for e in (old or []) if e[0] != key and (ttl is None or e[1] + ttl > now)]
            index.append([key, now])
            assert limit is not None
            dropped = [e[0] for e in index[:-limit]]
            return index[-limit:], dropped

        for stale in await self.store.update(f"{self.prefix}:index", change):
            await self.store.delete(stale)

    async def clear(self) -> None:
        """Drop every entry recorded in the index (with ``max_entries``)."""
        for entry in await self.store.get(f"{self.prefix}:index") or []:
            await self.store.delete(entry[0])
        await self.store.delete(f"{self.prefix}:index")



_NAMES: dict[type, str] = {Text: "texts", Thinking: "thinking"}
"""The name of a run of plain deltas in an entry, by their type."""

_MADE: dict[str, Callable[[str], Block]] = {name: cls for cls, name in _NAMES.items()}


def _to_entry(blocks: Iterable[Block]) -> list[Any]:
    """``blocks`` as an entry keeps them (JSON): each as :func:`~cuca.convert.unstructure`
    writes a block, except that consecutive plain deltas of text, or of reasoning (no
    field set but the text), are kept as one run of their strings,
    ``{"texts": ["Hel", "lo"]}`` or ``{"thinking": [...]}``: one string a block, so a
    hit gives back the same blocks. The runs are a :class:`~cuca.recording.Recording`'s:
    a live turn's blocks come in the one it was recorded in as it streamed, so keeping a
    long answer makes no object and no Python step per delta."""
    recording = blocks if isinstance(blocks, Recording) else Recording(blocks)
    return [
        {_NAMES[part.kind]: part.texts} if isinstance(part, Run) else unstructure(part)
        for part in recording.parts
    ]


def _replay(key: str, entry: Any) -> Replay:
    """The turn kept in ``entry`` (under ``key``), or the :class:`StoreError` of an
    entry that holds none."""
    try:
        return Replay(_from_entry(entry["blocks"]), structure(entry["summary"], TurnSummary))
    except (ConfigurationError, KeyError, TypeError) as exc:
        raise StoreError(f"{key} holds no turn a cache kept: {exc}") from None


def _from_entry(kept: Sequence[Any]) -> tuple[Block, ...]:
    """The blocks of an entry written by :func:`_to_entry` (or, before the runs, one
    adjacently tagged block an element); an element that is neither raises
    :class:`~cuca.errors.ConfigurationError`."""
    blocks: list[Block] = []
    for element in kept:
        if type(element) is dict and len(element) == 1:
            ((name, texts),) = element.items()
            make = _MADE.get(name)
            if make is not None and type(texts) is list and set(map(type, texts)) <= {str}:
                blocks.extend(map(make, texts))
                continue
        blocks.append(structure(element, Block))
    return tuple(blocks)
