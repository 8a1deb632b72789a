"""Benchmark the CPU cost of the session log and the trace plugin on a 20,000-chunk turn.

Run ``python tests/benchmarks/bench_observers.py [--chunks N]``: one command, one run.
The replay server of ``bench_openai_stream.py`` (a child process) serves its OpenAI
transcript; cuca streams it with no plugin, with ``SessionLog`` (without and with raw
bytes), with ``OtelPlugin`` (SDK tracer, in-memory exporter) and with both. The variants
take turns, round after round, so that a busy machine slows them alike; each keeps its
best round. CPU is this process's ``time.process_time`` (the server is not counted).
Reported: CPU ms per turn and the overhead against no plugin (target: under 5 % of the
turn's own CPU). Never part of pass/fail.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import trio
from bench_openai_stream import API_KEY, MODEL

from cuca import CucaClient, CucaPlugin, ProviderEndpoint, SessionLog, Text, UnifiedRequest

CHUNKS = 20_000
ROUNDS = 11
HERE = Path(__file__).resolve().parent


def start_server(chunks: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "bench_openai_stream.py"), "--serve", str(chunks)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def tracer_plugin() -> CucaPlugin:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cuca.otel import OtelPlugin

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return OtelPlugin(tracer_provider=provider)


async def one_turn(url: str, plugins: Sequence[CucaPlugin]) -> float:
    """The CPU seconds of one turn streamed to its end with ``plugins``."""
    request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
    blocks = 0
    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key=API_KEY, plugins=plugins
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
    best: dict[str, float] = {}
    try:
        for _name, plugins in variants:  # warm-up: imports, price data, sqlite pages
            trio.run(one_turn, url, plugins())
        for _ in range(ROUNDS):
            for name, plugins in variants:
                cpu = trio.run(one_turn, url, plugins())
                best[name] = min(best.get(name, cpu), cpu)
    finally:
        process.terminate()
        process.wait()
        log.close()
        raw_log.close()
    base = best["no plugin"]
    print(f"one turn of {CHUNKS:,} chunks over loopback, best of {ROUNDS} rounds\n")
    print(f"{'variant':26} {'CPU ms/turn':>12} {'overhead':>9}")
    for name, _ in variants:
        overhead = (best[name] - base) / base * 100
        print(f"{name:26} {best[name] * 1000:>12.1f} {overhead:>8.1f}%")
    print("\ntarget: each plugin under 5 % of the turn's own CPU")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--chunks"]:
        CHUNKS = int(sys.argv[2])
    main()
