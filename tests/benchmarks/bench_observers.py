"""Benchmark the CPU cost of the session log and the trace plugin on a 20,000-chunk turn.

Run ``python tests/benchmarks/bench_observers.py [--chunks N]``: one command, one run.
The replay server of ``bench_openai_stream.py`` (a child process) serves its OpenAI
transcript; cuca streams it with no plugin, with ``SessionLog`` (without and with raw
bytes), with ``OtelPlugin`` (SDK tracer, in-memory exporter) and with both. The variants
take turns, round after round, so that a busy machine slows them alike. CPU is this
process's ``time.process_time`` (the server is not counted). Reported: the best round's
CPU ms per turn, and the overhead against no plugin as the median over rounds of the
difference within a round (target: under 5 % of the turn's own CPU). Never part of
pass/fail.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import trio
from bench_openai_stream import API_KEY, MODEL, start_server

from cuca import CucaClient, CucaPlugin, ProviderEndpoint, SessionLog, Text, UnifiedRequest

CHUNKS = 20_000
ROUNDS = 15




def tracer_plugin() -> CucaPlugin:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cuca.observers.otel import OtelPlugin

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return OtelPlugin(tracer_provider=provider)


async def one_turn(url: str, plugins: Sequence[CucaPlugin]) -> float:
    """The CPU seconds of one turn streamed to its end with ``plugins``."""
    request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
    blocks = 0
    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url=f"{url}/n{CHUNKS}/v1", api_key=API_KEY, plugins=plugins
    ) as client:
        cpu = time.process_time()
        async with client.generate_stream(request) as stream:
            async for item in stream:
                if isinstance(item, Text):
                    blocks += 1
        cpu = time.process_time() - cpu
    assert blocks == CHUNKS, blocks
    return cpu


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    log = SessionLog(folder / "bench.db")
    raw_log = SessionLog(folder / "bench-raw.db", raw=True)
    otel = tracer_plugin()
    variants: list[tuple[str, Callable[[], Sequence[CucaPlugin]]]] = [
        ("no plugin", lambda: ()),
        ("SessionLog", lambda: (log,)),
        ("SessionLog(raw=True)", lambda: (raw_log,)),
        ("OtelPlugin", lambda: (otel,)),
        ("SessionLog + OtelPlugin", lambda: (log, otel)),
    ]
    process, url = start_server(CHUNKS)
    runs: dict[str, list[float]] = {name: [] for name, _ in variants}
    try:
        for _name, plugins in variants:  # warm-up: imports, price data, sqlite pages
            trio.run(one_turn, url, plugins())
        for _ in range(ROUNDS):
            for name, plugins in variants:
                runs[name].append(trio.run(one_turn, url, plugins()))
        inside = time_inside_the_log(url, log)
    finally:
        process.terminate()
        process.wait()
        log.close()
        raw_log.close()
    report(runs)
    turn = min(runs["no plugin"])
    print(
        f"\nCPU inside SessionLog's hooks (observe, on_items, on_end), best of {ROUNDS} "
        f"turns: {inside * 1000:.1f} ms = {inside / turn * 100:.1f} % of the turn"
    )


def time_inside_the_log(url: str, log: SessionLog) -> float:
    """The CPU seconds spent in the log's own hooks during one turn (best of ROUNDS):
    the part of the overhead that does not depend on how busy the machine is."""
    import cuca.observers.session_log as module

    spent = [0.0]

    def timed(function: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object) -> object:
            start = time.process_time()
            try:
                return function(*args)
            finally:
                spent[0] += time.process_time() - start

        return wrapper

    recorder, plugin = module._Recorder, module.SessionLog
    originals = (recorder.on_items, recorder.on_end, plugin.observe)
    recorder.on_items = timed(recorder.on_items)  # type: ignore[method-assign]
    recorder.on_end = timed(recorder.on_end)  # type: ignore[method-assign]
    plugin.observe = timed(plugin.observe)  # type: ignore[method-assign,assignment]
    try:
        best = float("inf")
        for _ in range(ROUNDS):
            spent[0] = 0.0
            trio.run(one_turn, url, (log,))
            best = min(best, spent[0])
    finally:
        recorder.on_items, recorder.on_end, plugin.observe = originals  # type: ignore[method-assign]
    return best


def report(runs: dict[str, list[float]]) -> None:
    """Per variant: the best round's CPU, and the overhead as the median over rounds of
    (variant - no plugin) / no plugin in the same round, which a machine that speeds up
    or slows down between rounds disturbs less than a ratio of two minima."""
    base = runs["no plugin"]
    print(f"one turn of {CHUNKS:,} chunks over loopback, {ROUNDS} rounds\n")
    print(f"{'variant':26} {'best CPU ms':>12} {'overhead (median)':>18}")
    for name, cpus in runs.items():
        ratios = sorted((cpu - b) / b * 100 for cpu, b in zip(cpus, base, strict=True))
        median = ratios[len(ratios) // 2]
        print(f"{name:26} {min(cpus) * 1000:>12.1f} {median:>17.1f}%")
    print("\ntarget: each plugin under 5 % of the turn's own CPU")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--chunks"]:
        CHUNKS = int(sys.argv[2])
    main()
