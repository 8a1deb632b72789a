"""Benchmark the tool loop's own CPU per step, against the turn it wraps.

Run ``python tests/benchmarks/bench_tool_loop.py [--chunks N]``: one command, one run.
The replay server of ``bench_openai_stream.py`` (a child process) serves a 20,000-chunk
OpenAI answer. Side by side, after a warm-up, best CPU of ``REPEATS`` runs each (taken in turns):

- the turn alone: ``client.generate_stream`` read to its end;
- the same turn as one step of ``client.run_tools`` (a tool declared, no call made):
  the step marker, every batch forwarded through the loop's channel, the step's
  20,000 deltas merged into the assistant message appended to the conversation.

Reported: CPU milliseconds of each, the loop's overhead per step in milliseconds and
as a share of the turn's own CPU (the target is under 5%). Never part of pass/fail.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_openai_stream as server

REPEATS = 15


def noop(text: str) -> str:
    """Never called: the answer makes no call."""
    return text


async def turn(url: str) -> int:
    from cuca import CucaClient, ProviderEndpoint, UnifiedRequest

    request = UnifiedRequest.new(server.MODEL).add_user_message("Say hello many times.")
    items = 0
    async with CucaClient(ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key="k") as c:
        async with c.generate_stream(request) as stream:
            async for _ in stream:
                items += 1
    return items


async def loop_step(url: str) -> int:
    from cuca import CucaClient, ProviderEndpoint, UnifiedRequest

    request = UnifiedRequest.new(server.MODEL).add_user_message("Say hello many times.")
    items = 0
    async with CucaClient(ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key="k") as c:
        async with c.run_tools(request, [noop], max_steps=2) as stream:
            async for _ in stream:
                items += 1
    assert stream.complete and len(stream.conversation.messages) == 2
    return items - 1  # the Step marker


def best_cpu(
    runs: list[Callable[[str], Awaitable[int]]], url: str
) -> list[tuple[float, int]]:
    """The best CPU time and the item count of each of ``runs``, measured in turns
    (A, B, A, B...) so that a busy neighbour slows both alike."""
    for run in runs:
        trio.run(run, url)  # warm-up
    best = [(float("inf"), 0)] * len(runs)
    for _ in range(REPEATS):
        for index, run in enumerate(runs):
            cpu = time.process_time()
            items = trio.run(run, url)
            best[index] = min(best[index], (time.process_time() - cpu, items))
    return best


def main() -> None:
    if "--chunks" in sys.argv:
        server.CHUNKS = int(sys.argv[sys.argv.index("--chunks") + 1])
    else:
        server.CHUNKS = 20_000
    process, root = server.start_server()
    url = f"{root}/n{server.CHUNKS}"  # the server serves a stream of that length there
    try:
        (plain, plain_items), (looped, loop_items) = best_cpu([turn, loop_step], url)
    finally:
        process.terminate()
        process.wait()
    assert plain_items == loop_items, (plain_items, loop_items)
    overhead = looped - plain
    print(f"{server.CHUNKS:,} chunks, {plain_items:,} items, best CPU of {REPEATS} runs")
    print(f"{'the turn alone':<36}{plain * 1000:>10.1f} ms CPU")
    print(f"{'the same turn as a run_tools step':<36}{looped * 1000:>10.1f} ms CPU")
    print(
        f"tool loop overhead per step: {overhead * 1000:.1f} ms CPU, "
        f"{overhead / plain:+.1%} of the turn's own CPU (target: under 5%)"
    )


if __name__ == "__main__":
    main()
