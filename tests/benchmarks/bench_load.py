"""Load: one client, 500 concurrent turns of 1,000 chunks each (twice), over loopback.

Run ``python tests/benchmarks/bench_load.py [TURNS] [CHUNKS]``. A replay server in a
child process serves an OpenAI transcript; one ``CucaClient`` runs every turn at once
in one nursery. Reported: wall time, chunks per second, peak RSS of the client, how
many connections the server saw (the pool is reused), and open file descriptors before
and after (nothing is left open). Each turn must yield exactly CHUNKS text blocks.
Never part of pass/fail.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_openai_stream import API_KEY, MODEL, transcript

ROUNDS = 2


async def serve(chunks: int) -> None:
    from cuca.testing import Reply, open_replay_server

    async with open_replay_server(Reply(transcript(chunks))) as server:
        print(server.url, flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)  # the client asks for stats
        print(json.dumps({"opened": server.connections_opened, "requests": len(server.requests)}))


async def load(url: str, turns: int, chunks: int) -> dict[str, float]:
    from cuca import CucaClient, ProviderEndpoint, Text, UnifiedRequest

    request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
    counts: list[int] = []

    async def turn(client: CucaClient) -> None:
        blocks = 0
        async with client.generate_stream(request) as stream:
            async for item in stream:
                blocks += isinstance(item, Text)
        counts.append(blocks)

    fds_before = len(os.listdir("/proc/self/fd"))
    start = time.perf_counter()
    async with CucaClient(ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key=API_KEY) as c:
        for _ in range(ROUNDS):  # the second round runs on the pool the first one left
            async with trio.open_nursery() as nursery:
                for _ in range(turns):
                    nursery.start_soon(turn, c)
    wall = time.perf_counter() - start
    fds_after = len(os.listdir("/proc/self/fd"))
    assert counts == [chunks] * turns * ROUNDS, "a turn lost or duplicated blocks"
    return {"wall": wall, "fds_before": fds_before, "fds_after": fds_after}


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    chunks = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(chunks)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        url = server.stdout.readline().strip()
        result = trio.run(load, url, turns, chunks)
        server.stdin.write("stats\n")
        server.stdin.flush()
        stats = json.loads(server.stdout.readline())
    finally:
        server.kill()
        server.wait()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = turns * chunks * ROUNDS
    print(f"{ROUNDS} rounds of {turns} concurrent turns x {chunks:,} chunks = {total:,} chunks")
    print(f"wall time            {result['wall']:8.2f} s")
    print(f"throughput           {total / result['wall']:8,.0f} chunks/s")
    print(f"client peak RSS      {rss:8.1f} MiB")
    print(f"connections opened   {stats['opened']:8d}  for {stats['requests']} requests")
    print(f"open fds before/after {result['fds_before']:4.0f} / {result['fds_after']:.0f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        trio.run(serve, int(sys.argv[2]))
    else:
        main()
