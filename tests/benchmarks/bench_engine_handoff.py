"""Benchmark the local engine's hand-off of one token from its thread to the consumer.

Run ``python tests/benchmarks/bench_engine_handoff.py [--tokens N]``. A stand-in engine
thread (no model: the hand-off alone) emits N tokens, one every ``PACE`` seconds, so
that each token reaches the consumer alone, as a real model's decode steps do. CPU time
of the whole process (both threads) per token, median of ``REPEATS`` runs, for:

- pacing alone: the thread sleeps between tokens and hands nothing over (the cost every
  row below includes);
- a bare channel send from the thread: ``trio.from_thread.run(send.send, token)``, the
  consumer reading ``async for token in receive`` (the peer the issue names);
- the same with ``trio.from_thread.run_sync(send.send_nowait, token)``;
- cuca's hand-off alone: the ``engine`` stage's source (the relay) pulled by the
  consumer's task, as a fused turn does (:mod:`cuca.stages.runner`);
- a whole local turn through ``CucaClient`` (hand-off, output parser, a ``Text`` per
  token, the stream).

Also printed: tokens per consumer wake-up (1.0 means every token came alone). Target
(issue 10): cuca's hand-off costs no more than one channel send. Never part of
pass/fail.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

TOKENS = 3_000
PACE = 0.0003
REPEATS = 5


class PacedEngine:
    """An engine that emits ``tokens`` one-character tokens from its own thread, one
    every ``PACE`` seconds (the :class:`cuca.engine.worker.Engine` protocol)."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def prepare(self, request: Any) -> Any:
        from cuca.engine.formats import OutputFormat
        from cuca.engine.records import GenerationStart

        return GenerationStart(
            OutputFormat(reasoning=None), False
        )  # its format, as a prepared turn

    def submit(self, prepared: Any, sink: Any) -> threading.Thread:
        thread = threading.Thread(target=self._run, args=(sink,), daemon=True)
        thread.start()
        return thread

    def withdraw(self, ticket: Any) -> bool:
        return False

    def wake(self) -> None:
        pass

    def _run(self, sink: Any) -> None:
        from cuca.engine.records import GenerationEnd
        from cuca.types import PromptCacheUsage

        for _ in range(self.tokens):
            time.sleep(PACE)
            sink.token("a")
        sink.finish(GenerationEnd(PromptCacheUsage(0, 1), self.tokens, "stop"))


def paced(tokens: int, hand: Callable[[int], None]) -> threading.Thread:
    def run() -> None:
        for i in range(tokens):
            time.sleep(PACE)
            hand(i)
        hand(-1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def pacing_alone(tokens: int) -> tuple[int, int]:
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()
    paced(tokens, lambda i: token.run_sync_soon(done.set) if i < 0 else None)
    await done.wait()
    return tokens, 0  # nothing handed over


async def bare(tokens: int, wait: bool) -> tuple[int, int]:
    """A channel send from the thread per token: ``send`` through ``from_thread.run``
    (``wait``), or ``send_nowait`` through ``from_thread.run_sync`` into a channel with
    room for all."""
    send, receive = trio.open_memory_channel[int](0 if wait else tokens + 1)
    token = trio.lowlevel.current_trio_token()

    def hand(i: int) -> None:
        if i < 0:
            trio.from_thread.run_sync(send.close, trio_token=token)
        elif wait:
            trio.from_thread.run(send.send, i, trio_token=token)
        else:
            trio.from_thread.run_sync(send.send_nowait, i, trio_token=token)

    paced(tokens, hand)
    got = 0
    async for _ in receive:
        got += 1
    return got, got


async def bare_send(tokens: int) -> tuple[int, int]:
    return await bare(tokens, wait=True)


async def bare_send_nowait(tokens: int) -> tuple[int, int]:
    return await bare(tokens, wait=False)


async def cuca_handoff(tokens: int) -> tuple[int, int]:
    from contextlib import aclosing

    from cuca.engine.worker import engine_stage
    from cuca.types import UnifiedRequest

    source = engine_stage(PacedEngine(tokens))
    got = wakeups = 0
    async with aclosing(source.open([UnifiedRequest.new("m")])) as batches:
        async for batch in batches:
            tokens_in = sum(1 for item in batch if type(item) is str)
            got += tokens_in
            wakeups += tokens_in > 0
    return got, wakeups


async def cuca_turn(tokens: int) -> tuple[int, int]:
    from cuca import CucaClient, ProviderEndpoint, UnifiedRequest

    engine: Any = PacedEngine(tokens)
    got = 0
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=engine) as client:
        async with client.generate_stream(UnifiedRequest.new("m")) as stream:
            wakeups = 0
            while True:
                try:
                    batch = await stream.receive_batch()
                except StopAsyncIteration:
                    break
                wakeups += 1
                got += len(batch)
    return got, wakeups


CASES: list[tuple[str, Callable[[int], Awaitable[tuple[int, int]]]]] = [
    ("pacing alone (no hand-off)", pacing_alone),
    ("bare: from_thread.run(send.send)", bare_send),
    ("bare: from_thread.run_sync(send_nowait)", bare_send_nowait),
    ("cuca: engine source pulled (hand-off)", cuca_handoff),
    ("cuca: whole local turn (CucaClient)", cuca_turn),
]


def measure(case: Callable[[int], Awaitable[tuple[int, int]]], tokens: int) -> dict[str, float]:
    trio.run(case, min(tokens, 200))  # warm-up
    runs = []
    for _ in range(REPEATS):
        cpu, wall = time.process_time(), time.perf_counter()
        got, wakeups = trio.run(case, tokens)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        runs.append({"cpu": cpu, "wall": wall, "got": got, "wakeups": wakeups})
    runs.sort(key=lambda run: run["cpu"])
    return runs[len(runs) // 2]


def main(tokens: int) -> None:
    print(
        f"{tokens:,} tokens, one every {PACE * 1000:g} ms from a thread; CPU of the whole "
        f"process, median of {REPEATS} runs\n"
    )
    print(f"{'case':42} {'tokens':>7} {'per wake':>9} {'CPU µs/token':>13} {'- pacing':>9}")
    results: dict[str, float] = {}
    pacing = 0.0
    for name, case in CASES:
        run = measure(case, tokens)
        per_token = run["cpu"] * 1e6 / tokens
        if case is pacing_alone:
            pacing = per_token
        results[name] = per_token - pacing
        per_wake = f"{run['got'] / run['wakeups']:.2f}" if run["wakeups"] else "-"
        print(
            f"{name:42} {int(run['got']):>7} {per_wake:>9} {per_token:>13.1f} "
            f"{per_token - pacing:>9.1f}"
        )
    bare = results[CASES[1][0]]
    ours = results[CASES[3][0]]
    ratio = ours / bare if bare > 0 else float("nan")
    verdict = "met" if ratio <= 1.0 else "MISSED"
    print(
        f"\ncuca hand-off / bare channel send from a thread (pacing taken off): "
        f"{ratio:.2f}x (target <= 1x: {verdict})"
    )


if __name__ == "__main__":
    main(int(sys.argv[2]) if sys.argv[1:2] == ["--tokens"] else TOKENS)
