"""The session log: every turn recorded to one SQLite file, readable and replayable.

``SessionLog(path)`` is a plugin. Each turn gets a row when its request leaves the
request hooks (status ``running``) and the rest when it ends: its blocks in cuca's
JSON form (deltas merged), the error items, the error that ended it, usage, cost,
timing, and the raw response bytes when ``raw=True``. Every write goes through one writer
thread (``cuca.observers._writer``): the event loop only queues it, and the thread
commits what is queued as one transaction in WAL mode, so concurrent turns, threads and
processes share the file without a turn ever waiting on the disk or on another process's
lock. A turn is on disk moments after it ends; :meth:`SessionLog.flush` waits for it,
and :meth:`SessionLog.close` writes everything queued. A process killed mid-turn leaves
every turn it had written intact; its unfinished row reads back as ``interrupted``. A
tool loop's approval decisions are stored with the turn whose calls they decided
(``LoggedTurn.approvals``), a budget's warnings with the turn whose charge crossed
them (``LoggedTurn.budget_warnings``).
"""

from __future__ import annotations

import contextvars
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from cuca.assemble import BlockAssembler
from cuca.convert import structure, unstructure
from cuca.errors import ConfigurationError, CucaError
from cuca.plugins import (
    ApprovalEvent,
    BudgetWarning,
    CucaPlugin,
    LoopObserver,
    TurnObserver,
    TurnOutcome,
)
from cuca.types import Block, PromptCacheUsage, TokenUsage, UnifiedRequest

from ._writer import Writer

__all__ = ["LoggedTurn", "SessionLog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    status TEXT NOT NULL,
    pid INTEGER NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    blocks TEXT,
    errors TEXT,
    error TEXT,
    usage TEXT,
    cache_usage TEXT,
    finish_reason TEXT,
    cost TEXT,
    first_block_s REAL,
    total_s REAL,
    raw BLOB,
    approvals TEXT,
    budget_warnings TEXT,
    provider_finish_reason TEXT
)
"""

_COLUMNS = (
    "id, started_at, status, pid, provider, model, request, blocks, errors, error, usage, "
    "cache_usage, finish_reason, cost, first_block_s, total_s, raw, approvals, budget_warnings, "
    "provider_finish_reason"
)

_STEP: contextvars.ContextVar[list[_Recorder]] = contextvars.ContextVar("cuca_session_log_step")
"""The turns a tool loop's current step opened (set by the loop observer's ``step``, in
the loop's task, which is where the step's turn is observed and its calls run)."""


@attrs.frozen
class LoggedTurn:
    """One turn as the session log holds it.

    ``status`` is ``ok``, ``error``, ``cancelled``, ``running`` (still streaming in a live
    process) or ``interrupted`` (its process died mid-turn). ``blocks`` are the blocks the
    consumer received, deltas merged as in a `Completion`; ``errors`` the non-fatal error
    items and ``error`` the one that ended the turn, each as ``{"kind": class name,
    "message": text}``. ``raw`` is the response body when the log was opened with
    ``raw=True``. ``approvals`` are the decisions on this turn's tool calls when a tool
    loop asked for them (each ``ApprovalEvent.to_dict()``: call id, name, arguments,
    outcome, by, seconds, reason, edited arguments). ``budget_warnings`` are the
    :class:`~cuca.Budget` warnings this turn's charge crossed (each
    ``BudgetWarning.to_dict()``: unit, spent, limit, fraction). ``finish_reason`` is the
    response's :class:`~cuca.FinishReason` as text, ``provider_finish_reason`` the
    backend's own word beside it (``None`` in a file written before it was kept).
    """

    id: int
    started_at: datetime
    status: str
    provider: str
    model: str
    request: UnifiedRequest
    blocks: tuple[Block, ...] = ()
    errors: tuple[dict[str, str], ...] = ()
    error: dict[str, str] | None = None
    usage: TokenUsage | None = None
    prompt_cache_usage: PromptCacheUsage | None = None
    finish_reason: str | None = None
    cost: Decimal | None = None
    first_block_seconds: float | None = None
    total_seconds: float | None = None
    raw: bytes | None = attrs.field(default=None, repr=False)
    approvals: tuple[dict[str, Any], ...] = ()
    budget_warnings: tuple[dict[str, Any], ...] = ()
    provider_finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The turn as JSON-ready data (``raw`` as text, undecodable bytes escaped)."""
        return {
            "id": self.id,
            "started_at": self.started_at.isoformat(),
            "status": self.status,
            "provider": self.provider,
            "model": self.model,
            "request": unstructure(self.request),
            "blocks": [unstructure(b) for b in self.blocks],
            "errors": list(self.errors),
            "error": self.error,
            "usage": unstructure(self.usage),
            "prompt_cache_usage": unstructure(self.prompt_cache_usage),
            "finish_reason": self.finish_reason,
            "cost": None if self.cost is None else f"{self.cost:f}",
            "first_block_seconds": self.first_block_seconds,
            "total_seconds": self.total_seconds,
            "raw": None if self.raw is None else self.raw.decode("utf-8", "backslashreplace"),
            "approvals": list(self.approvals),
            "budget_warnings": list(self.budget_warnings),
            "provider_finish_reason": self.provider_finish_reason,
        }


class SessionLog(CucaPlugin):
    """A plugin recording every turn of the clients it is given to into the SQLite file
    ``path`` (created if missing). ``raw=True`` also keeps each response body's bytes,
    which :func:`cuca.testing.logged_reply` turns into a replay transcript.

    One ``SessionLog`` may serve many clients and any number of concurrent turns; close
    it (or use it as a context manager) when done.
    """

    name = "session_log"

    def __init__(self, path: str | os.PathLike[str], *, raw: bool = False) -> None:
        self.path = Path(path)
        self.raw = self.observes_raw = raw
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA busy_timeout = 10000")
            # large pages: a long turn's blocks are one row of several hundred kilobytes
            self._db.execute("PRAGMA page_size = 16384")  # takes effect in a new file only
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(turns)")}
            # a file written before them
            for column in ("approvals", "budget_warnings", "provider_finish_reason"):
                if column not in columns:
                    self._db.execute(f"ALTER TABLE turns ADD COLUMN {column} TEXT")
            self._mark_interrupted()
        except sqlite3.Error as exc:
            self._db.close()
            raise ConfigurationError(f"cannot open the session log {self.path}: {exc}") from exc
        self._writer = Writer(self._db, self._lock, f"cuca session log {self.path.name}")

    def __repr__(self) -> str:
        return f"SessionLog({str(self.path)!r}, raw={self.raw})"

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Write every queued turn, then close the file."""
        try:
            self._writer.close()
        finally:
            with self._lock:
                self._db.close()

    def flush(self) -> None:
        """Wait until every turn queued so far is on disk (a blocking call: from trio,
        ``await trio.to_thread.run_sync(log.flush)``). A write that failed is raised
        here, as a :class:`~cuca.errors.ConfigurationError`."""
        self._checked(self._writer.flush)

    # -- writing ----------------------------------------------------------------------

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        recorder = _Recorder(self)
        started, pid = datetime.now(UTC), os.getpid()

        def insert(db: sqlite3.Connection) -> None:
            row = (
                started.isoformat(),
                pid,
                str(request.provider),
                request.model,
                json.dumps(unstructure(request), ensure_ascii=False),
            )
            cursor = db.execute(
                "INSERT INTO turns (started_at, status, pid, provider, model, request) "
                "VALUES (?, 'running', ?, ?, ?, ?)",
                row,
            )
            recorder.turn_id = cursor.lastrowid

        self._checked(lambda: self._writer.put(insert))
        step = _STEP.get(None)
        if step is not None:
            step.append(recorder)
        return recorder

    def observe_tools(self, request: UnifiedRequest) -> LoopObserver:
        return _LoopRecorder(self)

    def _approved(self, recorder: _Recorder, event: ApprovalEvent) -> None:
        """Queue ``event`` into the row of the turn ``recorder`` records."""
        recorder.approvals.append(event.to_dict())
        approvals = json.dumps(recorder.approvals, ensure_ascii=False)

        def update(db: sqlite3.Connection) -> None:
            db.execute("UPDATE turns SET approvals = ? WHERE id = ?", (approvals, recorder.turn_id))

        self._checked(lambda: self._writer.put(update))

    def _checked(self, call: Callable[[], None]) -> None:
        try:
            call()
        except sqlite3.Error as exc:
            raise ConfigurationError(f"cannot write the session log {self.path}: {exc}") from exc

    def _finish(self, recorder: _Recorder, values: Callable[[], dict[str, Any]]) -> None:
        """Queue the end of ``recorder``'s turn; ``values`` are computed in the writer
        thread (serialising the blocks, pricing the turn), off the event loop."""

        def update(db: sqlite3.Connection) -> None:
            row = values()
            names = ", ".join(f"{name} = ?" for name in row)
            db.execute(f"UPDATE turns SET {names} WHERE id = ?", (*row.values(), recorder.turn_id))

        self._checked(lambda: self._writer.put(update))

    def _mark_interrupted(self) -> None:
        running = self._db.execute("SELECT id, pid FROM turns WHERE status = 'running'")
        dead = [(turn_id,) for turn_id, pid in running.fetchall() if not _alive(pid)]
        if dead:
            self._db.executemany("UPDATE turns SET status = 'interrupted' WHERE id = ?", dead)

    # -- reading ----------------------------------------------------------------------

    def turns(self, limit: int | None = None) -> list[LoggedTurn]:
        """The logged turns, oldest first (the last ``limit`` of them when given); the
        turns queued so far are written first."""
        self.flush()
        with self._lock:
            if limit is None:
                rows = self._db.execute(f"SELECT {_COLUMNS} FROM turns ORDER BY id").fetchall()
            else:
                sql = f"SELECT {_COLUMNS} FROM turns ORDER BY id DESC LIMIT ?"
                rows = self._db.execute(sql, (limit,)).fetchall()[::-1]
        return [_turn(row) for row in rows]

    def turn(self, turn_id: int) -> LoggedTurn:
        """The turn numbered ``turn_id``; a :class:`ConfigurationError` if there is none."""
        self.flush()
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM turns WHERE id = ?", (turn_id,)
            ).fetchone()
        if row is None:
            raise ConfigurationError(f"no turn {turn_id} in the session log {self.path}")
        return _turn(row)


class _LoopRecorder(LoopObserver):
    """Links a tool loop's approval decisions to the turn of their step."""

    def __init__(self, log: SessionLog) -> None:
        self.log = log

    @contextmanager
    def step(self, number: int) -> Iterator[None]:
        token = _STEP.set([])
        try:
            yield
        finally:
            _STEP.reset(token)

    def approval(self, event: ApprovalEvent) -> None:
        turns = _STEP.get(None)
        if turns:
            self.log._approved(turns[-1], event)


class _Recorder(TurnObserver):
    """Collects one turn and writes it once, at its end.

    The blocks go through the stream's own :class:`~cuca.assemble.BlockAssembler`, so
    they are stored merged exactly as a `Completion` holds them.
    """

    def __init__(self, log: SessionLog) -> None:
        self.log = log
        self.turn_id: int | None = None  # set by the writer thread once the row exists
        self.raw = log.raw
        self.started = time.perf_counter()
        self.first: float | None = None
        self.blocks = BlockAssembler()
        self.errors: list[dict[str, str]] = []
        self.chunks: list[bytes] = []
        self.approvals: list[dict[str, Any]] = []
        self.warnings: list[dict[str, Any]] = []

    def on_raw(self, chunks: Sequence[bytes]) -> None:
        self.chunks.extend(chunks)

    def on_items(self, items: Sequence[Block | CucaError]) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.started
        self.blocks.feed(items)
        self.errors += [_error_json(item) for item in items if isinstance(item, CucaError)]

    def on_budget_warning(self, warning: BudgetWarning) -> None:
        self.warnings.append(warning.to_dict())

    def on_end(self, end: TurnOutcome) -> None:
        assembler, errors, chunks = self.blocks, self.errors, self.chunks
        warnings = self.warnings
        first, total = self.first, time.perf_counter() - self.started

        def values() -> dict[str, Any]:
            row: dict[str, Any] = {
                "status": end.status,
                "blocks": json.dumps(
                    [unstructure(b) for b in assembler.blocks()], ensure_ascii=False
                ),
                "errors": json.dumps(errors, ensure_ascii=False),
                "first_block_s": first,
                "total_s": total,
            }
            if end.error is not None:
                row["error"] = json.dumps(_error_json(end.error), ensure_ascii=False)
            response = end.response
            if response is not None:
                row["usage"] = _json_or_none(response.usage)
                row["cache_usage"] = _json_or_none(response.prompt_cache_usage)
                reason = response.finish_reason
                row["finish_reason"] = None if reason is None else reason.value
                row["provider_finish_reason"] = response.provider_finish_reason
                cost = response.cost
                row["cost"] = None if cost is None else f"{cost:f}"
            if chunks:  # only with raw=True, on HTTP turns that received a body
                row["raw"] = b"".join(chunks)
            if warnings:
                row["budget_warnings"] = json.dumps(warnings)
            return row

        self.log._finish(self, values)


def _error_json(error: BaseException) -> dict[str, str]:
    return {"kind": type(error).__name__, "message": str(error)}


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(unstructure(value))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _loads(text: str | None, cls: Any) -> Any:
    return None if text is None else structure(json.loads(text), cls)


def _turn(row: Sequence[Any]) -> LoggedTurn:
    (turn_id, started, status, pid, provider, model, request, blocks, errors, error,
     usage, cache, finish, cost, first, total, raw, approvals, warnings, native) = row  # fmt: skip
    if status == "running" and not _alive(pid):
        status = "interrupted"
    return LoggedTurn(
        id=turn_id,
        started_at=datetime.fromisoformat(started),
        status=status,
        provider=provider,
        model=model,
        request=_loads(request, UnifiedRequest),
        blocks=tuple(_loads(blocks, list[Block]) or ()),
        errors=tuple(json.loads(errors)) if errors else (),
        error=json.loads(error) if error else None,
        usage=_loads(usage, TokenUsage),
        prompt_cache_usage=_loads(cache, PromptCacheUsage),
        finish_reason=finish,
        cost=None if cost is None else Decimal(cost),
        first_block_seconds=first,
        total_seconds=total,
        raw=raw,
        approvals=tuple(json.loads(approvals)) if approvals else (),
        budget_warnings=tuple(json.loads(warnings)) if warnings else (),
        provider_finish_reason=native,
    )
