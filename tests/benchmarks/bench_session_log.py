"""Benchmark how long the session log stalls the event loop: 200 concurrent logged turns.

Run ``python tests/benchmarks/bench_session_log.py [--turns N] [--rounds R]``: one
command, one run. The replay server of ``bench_openai_stream.py`` (a child process)
serves a short OpenAI transcript; ``N`` turns run at once on one client while a
heartbeat task sleeps 1 ms at a time and records the longest gap between its wake-ups
beyond the sleep (the event loop's longest stall). Three variants take turns, round
after round: no plugin; ``SessionLog`` (its writes in its writer thread); and a copy of
what the log did before (every SQLite write on the event loop, each its own transaction,
10 s busy timeout), so that today's figure and the old one come from the same run.
Reported: the median over rounds of the longest stall (target for ``SessionLog``: under
5 ms). Never part of pass/fail.
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
from collections.abc import Sequence
from pathlib import Path

import trio
from bench_openai_stream import API_KEY, MODEL

from cuca import CucaClient, CucaPlugin, ProviderEndpoint, SessionLog, UnifiedRequest
from cuca.convert import unstructure
from cuca.plugins import TurnEnd, TurnObserver
from cuca.types import Block, UnifiedResponse

HERE = Path(__file__).resolve().parent
CHUNKS = 40


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

    def on_end(self, end: TurnEnd) -> None:
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
    stalls: dict[str, list[float]] = {"no plugin": [], "SessionLog": [], "writes on the loop": []}
    try:
        with tempfile.TemporaryDirectory() as folder:
            log = SessionLog(Path(folder) / "log.db")
            old = OnTheLoop(Path(folder) / "old.db")
            variants: dict[str, list[CucaPlugin]] = {
                "no plugin": [],
                "SessionLog": [log],
                "writes on the loop": [old],
            }
            for _ in range(rounds):
                for name, plugins in variants.items():
                    stalls[name].append(await longest_stall(url, plugins, turns))
            log.close()
    finally:
        server.terminate()
        server.wait()
    load = os.getloadavg()[0]
    print(f"{turns} concurrent logged turns of {CHUNKS} chunks, {rounds} rounds, load {load:.1f}")
    print(f"{'variant':<20} {'longest stall, median ms':>26} {'worst round ms':>16}")
    for name, values in stalls.items():
        print(f"{name:<20} {statistics.median(values) * 1e3:>26.2f} {max(values) * 1e3:>16.2f}")
    new = statistics.median(stalls["SessionLog"])
    before = statistics.median(stalls["writes on the loop"])
    print(f"SessionLog / writes on the loop: {new / before:.2f}x (target: SessionLog under 5 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trio.run(main, args.turns, args.rounds)
