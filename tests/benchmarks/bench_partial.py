"""Benchmark ``stream.partial()`` per block against reading the stream plainly.

Run ``python tests/benchmarks/bench_partial.py``: one command, one run. A structured
answer (an object with a list of records) arrives as ``BLOCKS`` text blocks of about
four characters, a model's tokens. Side by side, best of ``REPEATS``:

- in memory (no I/O: what the parsing itself costs): the blocks read plainly (each
  block's text taken), against :class:`cuca.partial.Partials` over the same batches;
- over loopback (a real turn, the replay server in this process, one block per SSE
  frame): ``async for item in stream`` against ``async for p in stream.partial()``.

Printed: milliseconds, microseconds per block, the ratio partial / plain. jiter parses
the text so far again after each block that may complete a value, so the cost per block
grows with the answer: the figures are given for two sizes. Never pass/fail.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support

from support.partials import Batches

from cuca import CucaClient, ProviderEndpoint, Text, UnifiedRequest
from cuca.partial import Partials
from cuca.schema import output_schema
from cuca.testing import Reply, open_replay_server

REPEATS = 5
SCHEMA = {"type": "object"}


def answer(records: int) -> str:
    rows = [{"id": i, "name": f"item {i}", "price": i * 1.25, "tags": ["a", "b"]}
            for i in range(records)]
    return json.dumps({"title": "inventory", "rows": rows})


def blocks(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


async def best(run: Callable[[], Awaitable[None]]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        await run()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def chat_frames(pieces: list[str]) -> bytes:
    frames = []
    for piece in pieces:
        chunk = {"id": "c", "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        frames.append(f"data: {json.dumps(chunk)}\n\n")
    end = {"id": "c", "object": "chat.completion.chunk",
           "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    frames.append(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n")
    return "".join(frames).encode()


async def in_memory(pieces: list[str]) -> tuple[float, float]:
    texts = [[Text(p)] for p in pieces]
    spec = output_schema(SCHEMA)

    async def plain() -> None:
        source = Batches(texts)
        got = []
        while True:
            try:
                batch = await source.receive_batch()
            except StopAsyncIteration:
                break
            got += [item.text for item in batch]

    async def partial() -> None:
        async for _ in Partials(Batches(texts), spec):
            pass

    return await best(plain), await best(partial)


async def loopback(pieces: list[str]) -> tuple[float, float]:
    request = UnifiedRequest.new("m").add_user_message("x").set_output_schema(SCHEMA)
    async with open_replay_server(Reply(chat_frames(pieces))) as server:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=server.url, api_key="k") as c:

            async def plain() -> None:
                async with c.generate_stream(request) as stream:
                    async for _ in stream:
                        pass

            async def partial() -> None:
                async with c.generate_stream(request) as stream:
                    async for _ in stream.partial():
                        pass

            await plain()
            return await best(plain), await best(partial)


async def main() -> None:
    for records in (20, 200):
        pieces = blocks(answer(records))
        n = len(pieces)
        for name, run in (("in memory", in_memory), ("loopback", loopback)):
            plain, partial = await run(pieces)
            print(
                f"{records:4d} records, {n:5d} blocks, {name:9s}: plain {plain:8.2f} ms "
                f"({plain / n * 1e3:6.2f} us/block), partial() {partial:8.2f} ms "
                f"({partial / n * 1e3:6.2f} us/block), ratio {partial / plain:6.2f}, "
                f"extra {(partial - plain) / n * 1e3:6.2f} us/block"
            )


if __name__ == "__main__":
    trio.run(main)
