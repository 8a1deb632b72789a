"""The session log's one writer thread: every SQLite write of a :class:`SessionLog`, off
the event loop, batched.

A turn's observer only queues what it has to say (a row to insert when the turn starts,
the values to set when it ends); the thread takes everything queued since its last
write and commits it as one transaction. The event loop never waits on the disk or on
SQLite's lock, which other processes sharing the file may hold for seconds.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable

__all__ = ["Writer"]

Job = Callable[[sqlite3.Connection], None]


class Writer:
    """Runs queued jobs on ``db`` in a thread of its own, a batch per transaction.

    An error in a batch is kept and raised by the next :meth:`put`, :meth:`flush` or
    :meth:`close` (the batch is rolled back), so a log that cannot write says so on the
    next turn instead of failing silently.
    """

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock, name: str) -> None:
        self._db = db
        self._lock = lock
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, job: Job) -> None:
        """Queue ``job``; it runs after every job queued before it. Once the writer is
        closed, ``sqlite3.ProgrammingError``: no thread is left to run it."""
        self._raise()
        if not self._thread.is_alive():
            raise sqlite3.ProgrammingError("the session log is closed")
        self._jobs.put(job)

    def flush(self) -> None:
        """Wait until every job queued so far is committed (at once once closed: close
        wrote them all)."""
        if self._thread.is_alive():
            self._jobs.join()
        self._raise()

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _run(self) -> None:
        while True:
            batch = [self._jobs.get()]
            while not self._jobs.empty():
                batch.append(self._jobs.get_nowait())
            jobs = [job for job in batch if job is not None]
            try:
                if jobs:
                    self._commit(jobs)
            finally:
                for _ in batch:
                    self._jobs.task_done()
            if len(jobs) < len(batch):
                return

    def _commit(self, jobs: list[Job]) -> None:
        with self._lock:
            self._transaction(jobs)

    def _transaction(self, jobs: list[Job]) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for job in jobs:
                job(self._db)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self.error = exc
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

