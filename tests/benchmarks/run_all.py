"""Run every benchmark in one go: ``python tests/benchmarks/run_all.py`` (or ``make bench``).

Each benchmark runs in its own process and prints its own table and ratios; this only
sequences them. Benchmarks are never part of pass/fail.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

RUNS = [
    ("import time and first turn in a fresh process (issue: core)", ["bench_import.py"]),
    ("SSE parser throughput (issue: core)", ["bench_sse.py"]),
    (
        "pipeline overhead, 20,000 chunks (issue: core)",
        ["bench_openai_stream.py", "--chunks", "20000"],
    ),
    ("OpenAI-compatible stream, 10,000 chunks (issue: providers)", ["bench_openai_stream.py"]),
    ("session log and trace plugin CPU, 20,000 chunks (issue: obs)", ["bench_observers.py"]),
    (
        "a turn's seams: limiter, budget and cache (a miss) vs none, 20,000 chunks (issue 33)",
        ["bench_seams.py"],
    ),
    (
        "reading a turn's opening for an in-stream retry vs not (issue 29)",
        ["bench_retry_opening.py"],
    ),
    ("session log: the event loop's longest hold, 200 concurrent turns", ["bench_session_log.py"]),
    ("tool loop CPU per step, 20,000 chunks (issue: tools)", ["bench_tool_loop.py"]),
    ("tool argument check per call vs jsonschema.validate (issue: guard)", ["bench_tool_guard.py"]),
    ("stream.partial() per block vs reading plainly (issue: guard)", ["bench_partial.py"]),
    ("MCP tool call vs the SDK's, loop step MCP vs Python tool (issue: mcp)", ["bench_mcp.py"]),
    ("local engine vs llama-cpp-python and llama-server (issue: engine)", ["bench_engine.py"]),
    (
        "count_tokens vs llama-cpp-python tokenize; one compaction pass (issue: context)",
        ["bench_context.py"],
    ),
    (
        "local engine: per-token hand-off from its thread vs a channel send (issue: core)",
        ["bench_engine_handoff.py"],
    ),
    (
        "structured output: grammar vs none vs llama-cpp-python (issue: api)",
        ["bench_grammar.py"],
    ),
    ("load: 2 x 500 concurrent turns of 1,000 chunks (issue: faults and load)", ["bench_load.py"]),
    (
        "limiter, budget, cache miss per turn on each store; cache hit vs live (issue: limits)",
        ["bench_limits.py"],
    ),
    (
        "embeddings: client CPU vs the openai SDK; local vs Llama.embed (issue 36)",
        ["bench_embeddings.py"],
    ),
    (
        "cuca serve vs llama-server and llama_cpp.server; as a gateway vs LiteLLM (issue 34)",
        ["bench_serve.py"],
    ),
]


def main() -> int:
    failed = 0
    for title, argv in RUNS:
        print(f"\n=== {title}\n", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, str(HERE / argv[0]), *argv[1:]])
        print(f"\n({argv[0]} took {time.perf_counter() - start:.0f} s, exit {code})", flush=True)
        failed += code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
