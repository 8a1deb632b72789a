"""Benchmark what reading a turn's opening costs: the transport holding the first bytes
until the first item, so that an in-stream overload before it can be sent again.

Run ``python tests/benchmarks/bench_retry_opening.py``: one command, one run. The replay
server of ``bench_openai_stream.py`` (a child process) serves its OpenAI transcript; cuca
streams it with the default ``RetryPolicy()`` (the opening is read: its first frames
are parsed twice) and with ``RetryPolicy.never()`` (nothing can be sent again, so the
opening is not read), side by side, round after round, on a short turn (10 chunks:
the fixed cost per turn) and a long one (20,000 chunks: the cost once the first item is
through, which should be none). CPU is this process's ``time.process_time``. Reported:
the best round's CPU per turn for each, and the overhead as the median over rounds of
the difference within a round. Never part of pass/fail.
"""

from __future__ import annotations

import statistics
import time

import trio
from bench_openai_stream import API_KEY, MODEL, start_server

from cuca import CucaClient, ProviderEndpoint, RetryPolicy, Text, UnifiedRequest

CASES = [(10, 200, 15), (20_000, 1, 9)]  # chunks, turns per round, rounds




async def turns(url: str, chunks: int, count: int, policy: RetryPolicy) -> float:
    """The CPU seconds per turn of ``count`` turns streamed to their end on one client."""
    request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
    base = f"{url}/n{chunks}/v1"
    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url=base, api_key=API_KEY, retry=policy
    ) as client:
        cpu = time.process_time()
        for _ in range(count):
            blocks = 0
            async with client.generate_stream(request) as stream:
                async for item in stream:
                    blocks += isinstance(item, Text)
            assert blocks == chunks, blocks
        return (time.process_time() - cpu) / count


def main() -> None:
    variants = [("RetryPolicy.never()", RetryPolicy.never()), ("RetryPolicy()", RetryPolicy())]
    print(f"{'chunks':>7} {'variant':<22} {'best CPU/turn':>14} {'overhead (median)':>18}")
    for chunks, count, rounds in CASES:
        process, url = start_server(chunks)
        runs: dict[str, list[float]] = {name: [] for name, _ in variants}
        try:
            for _name, policy in variants:  # warm-up
                trio.run(turns, url, chunks, count, policy)
            for _ in range(rounds):
                for name, policy in variants:
                    runs[name].append(trio.run(turns, url, chunks, count, policy))
        finally:
            process.terminate()
            process.wait()
        off, on = (runs[name] for name, _ in variants)
        extra = statistics.median(b - a for a, b in zip(off, on, strict=True))
        for name, times in runs.items():
            best = min(times) * 1000
            tail = f"{extra * 1e6:+.0f} us ({extra / min(off) * 100:+.1f} %)" if times is on else ""
            print(f"{chunks:>7} {name:<22} {best:>11.3f} ms {tail:>18}")


if __name__ == "__main__":
    main()
