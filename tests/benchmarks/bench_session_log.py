"""Benchmark how long the session log stalls the event loop: 200 concurrent logged turns.

Run ``python tests/benchmarks/bench_session_log.py [--turns N] [--rounds R]``: one
command, one run. The replay server of ``bench_openai_stream.py`` (a child process)
serves a short OpenAI transcript; ``N`` turns run at once on one client. Three variants
take turns, round after round: no plugin; ``SessionLog`` (its writes in its writer
thread); and a copy of what the log did before (every SQLite write on the event loop,
each its own transaction, 10 s busy timeout), so that today's figure and the old one
come from the same run.

Two figures per variant:
- the longest the log's own code held the event loop in one call (every observer hook
  timed, wall clock and this thread's CPU): what a log adds to any other task's wait,
  whatever else the machine runs (target for ``SessionLog``: under 5 ms);
- the event loop's longest stall as a heartbeat task sees it (it sleeps 1 ms at a time
  and records the longest gap beyond the sleep): this includes the 200 turns' own work
  and, on a shared machine, other processes, so read it against "no plugin".
Reported: medians over rounds. Never part of pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import trio
from bench_openai_stream import API_KEY, MODEL

from cuca import CucaClient, CucaPlugin, ProviderEndpoint, SessionLog, UnifiedRequest
from cuca.convert import unstructure
from cuca.errors import CucaError
from cuca.plugins import TurnObserver, TurnOutcome
from cuca.types import Block, UnifiedResponse

HERE = Path(__file__).resolve().parent
CHUNKS = 40
T = TypeVar("T")


class OnTheLoop(CucaPlugin):
    """The session log as it wrote before its writer thread: the insert when the turn
    starts and the update when it ends, on the event loop, one transaction each."""

    name = "on_the_loop"

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA busy_timeout = 10000")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS turns (id INTEGER PRIMARY KEY, request TEXT, "
            "blocks TEXT, usage TEXT, cost TEXT)"
        )

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        text = json.dumps(unstructure(request), ensure_ascii=False)
        cursor = self.db.execute("INSERT INTO turns (request) VALUES (?)", (text,))
        assert cursor.lastrowid is not None
        return _Row(self.db, cursor.lastrowid)


class _Row(TurnObserver):
    def __init__(self, db: sqlite3.Connection, row: int) -> None:
        self.db, self.row, self.blocks = db, row, list[Block]()

    def on_items(self, items: Sequence[object]) -> None:
        self.blocks += [i for i in items if not isinstance(i, Exception)]  # type: ignore[misc]

    def on_end(self, end: TurnOutcome) -> None:
        response: UnifiedResponse | None = end.response
        cost = None if response is None else response.cost
        self.db.execute(
            "UPDATE turns SET blocks = ?, usage = ?, cost = ? WHERE id = ?",
            (
                json.dumps([unstructure(b) for b in self.blocks]),
                json.dumps(unstructure(response.usage if response else None)),
                None if cost is None else f"{cost:f}",
                self.row,
            ),
        )


class Timed(CucaPlugin):
    """``inner`` with every call of its observer hooks timed: the longest one, in wall
    seconds and in this thread's CPU seconds."""

    def __init__(self, inner: CucaPlugin) -> None:
        self.inner, self.name = inner, inner.name
        self.longest = (0.0, 0.0)

    def timed(self, call: Callable[[], T]) -> T:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return call()
        finally:
            spent = (time.perf_counter() - wall, time.thread_time() - cpu)
            self.longest = (max(self.longest[0], spent[0]), max(self.longest[1], spent[1]))

    def observe(self, request: UnifiedRequest) -> TurnObserver | None:
        inner = self.timed(lambda: self.inner.observe(request))
        return None if inner is None else _TimedObserver(self, inner)


class _TimedObserver(TurnObserver):
    def __init__(self, plugin: Timed, inner: TurnObserver) -> None:
        self.plugin, self.inner = plugin, inner

    def on_items(self, items: Sequence[Block | CucaError]) -> None:
        self.plugin.timed(lambda: self.inner.on_items(items))

    def on_end(self, end: TurnOutcome) -> None:
        self.plugin.timed(lambda: self.inner.on_end(end))


async def longest_stall(url: str, plugins: Sequence[CucaPlugin], turns: int) -> float:
    """The event loop's longest stall (seconds) while ``turns`` logged turns run."""
    request = UnifiedRequest.new(MODEL).add_user_message("Say hello.")
    worst = 0.0
    done = trio.Event()

    async def heartbeat() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.perf_counter()
            await trio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before - 0.001)

    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url=f"{url}/n{CHUNKS}/v1", api_key=API_KEY, plugins=plugins
    ) as client:

        async def turn() -> None:
            await client.generate(request)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(heartbeat)
            async with trio.open_nursery() as turns_nursery:
                for _ in range(turns):
                    turns_nursery.start_soon(turn)
            done.set()
    return worst


async def main(turns: int, rounds: int) -> None:
    server = subprocess.Popen(
        [sys.executable, str(HERE / "bench_openai_stream.py"), "--serve", str(CHUNKS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    names = ("no plugin", "SessionLog", "writes on the loop")
    stalls: dict[str, list[float]] = {name: [] for name in names}
    held: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    try:
        with tempfile.TemporaryDirectory() as folder:
            log = SessionLog(Path(folder) / "log.db")
            old = OnTheLoop(Path(folder) / "old.db")
            for _ in range(rounds):
                for name, inner in (
                    ("no plugin", None),
                    ("SessionLog", log),
                    ("writes on the loop", old),
                ):
                    timed = None if inner is None else Timed(inner)
                    plugins: list[CucaPlugin] = [] if timed is None else [timed]
                    stalls[name].append(await longest_stall(url, plugins, turns))
                    held[name].append((0.0, 0.0) if timed is None else timed.longest)
            log.close()
    finally:
        server.terminate()
        server.wait()
    load = os.getloadavg()[0]
    print(f"{turns} concurrent logged turns of {CHUNKS} chunks, {rounds} rounds, load {load:.1f}")
    print(
        f"{'variant':<20} {'log holds the loop, ms':>23} {'(its CPU ms)':>13} "
        f"{'heartbeat stall, ms':>20}"
    )
    for name in names:
        wall = statistics.median(h[0] for h in held[name]) * 1e3
        cpu = statistics.median(h[1] for h in held[name]) * 1e3
        stall = statistics.median(stalls[name]) * 1e3
        print(f"{name:<20} {wall:>23.2f} {cpu:>13.2f} {stall:>20.2f}")
    new = statistics.median(h[0] for h in held["SessionLog"])
    before = statistics.median(h[0] for h in held["writes on the loop"])
    print(
        f"longest hold: SessionLog {new * 1e3:.2f} ms against {before * 1e3:.2f} ms for writes "
        f"on the loop ({before / new:.0f}x shorter; target under 5 ms)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trio.run(main, args.turns, args.rounds)
