"""Benchmark embeddings: the client's CPU on the OpenAI wire, and the local engine.

Run ``python tests/benchmarks/bench_embeddings.py`` (``--local`` or ``--http`` for one
part). Never part of pass/fail.

1. ``--http``: 100 inputs whose vectors have 1536 dimensions from a loopback server
   speaking OpenAI's ``/v1/embeddings`` (one answer, built once, in the format each
   client asks for: cuca asks for ``encoding_format: "base64"``, the openai SDK asks for
   base64 too when no format is given and decodes it with numpy into lists). The
   figure is the client process's CPU time per call (``time.process_time``; the server
   runs in another process; best of ``REPEATS`` after a warm-up), cuca's
   ``client.embed`` against the SDK's ``embeddings.create``. Also: the two ways of
   reading a base64 vector (numpy's ``frombuffer`` and ``array("f")``), which chose
   cuca's vector type.
2. ``--local``: 1,000 short texts (``--texts``; about 10 tokens each) on SmolLM2-135M
   with mean pooling, cuca's ``client.embed`` against llama-cpp-python's
   ``Llama.embed``, both loaded in this process with the same threads (``--threads``,
   the machine's cores by default) and steps of 512 tokens. Every text is embedded
   once per side, in calls of one step each (packed as ``Llama.embed`` packs its
   steps, so together they are the steps of one call of every text), the sides
   alternating call by call after a warm-up of one step each; the figures are the
   totals, the medians of the calls (wall time: the work is in llama.cpp's threads;
   and the process's CPU time) and the median of the calls' ratios. What it costs:
   the texts are ~10,000 tokens in 20 steps, ~2.7 TFLOP of SmolLM2's Q4_1 matrix
   products (``ggml_vec_dot_q4_1_q8_1`` is two thirds of the profile), about 6.5 s of
   one core per step on the project's machine: the part is ~260 s of CPU, two to three
   minutes of a quiet 2-core machine. On a loaded one, ``--threads 1``: llama.cpp's
   threads spin at each operation's barrier, so two threads on busy cores double the
   CPU time and halve the speed.
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing
import os
import random
import struct
import time
from array import array
from collections.abc import Awaitable, Callable
from typing import Any

import trio

REPEATS = 7
THREADS = max(1, len(os.sched_getaffinity(0)))


def best(
    run: Callable[[], Any],
    clock: Callable[[], float] = time.perf_counter,
    repeats: int = REPEATS,
) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = clock()
        run()
        times.append(clock() - start)
    return min(times)


async def abest(
    run: Callable[[], Awaitable[Any]],
    clock: Callable[[], float] = time.perf_counter,
    repeats: int = REPEATS,
) -> float:
    await run()
    times = []
    for _ in range(repeats):
        start = clock()
        await run()
        times.append(clock() - start)
    return min(times)


# -- 1. the OpenAI wire over loopback ------------------------------------------------------

INPUTS, DIMENSIONS = 100, 1536


def openai_answer(count: int, dimensions: int, encoding: str) -> bytes:
    """The body OpenAI's ``/v1/embeddings`` sends for ``count`` inputs."""
    rng = random.Random(7)
    data = []
    for index in range(count):
        values = [rng.uniform(-0.1, 0.1) for _ in range(dimensions)]
        raw = struct.pack(f"<{dimensions}f", *values)
        vector: Any = (
            base64.b64encode(raw).decode()
            if encoding == "base64"
            else list(struct.unpack(f"<{dimensions}f", raw))
        )
        data.append({"object": "embedding", "index": index, "embedding": vector})
    body = {
        "object": "list",
        "data": data,
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 5 * count, "total_tokens": 5 * count},
    }
    return json.dumps(body).encode()


def serve(port: multiprocessing.connection.Connection) -> None:
    """A loopback server (in its own process) answering every POST with the body for
    the format the request asks for."""
    import socket
    import threading

    bodies = {fmt: openai_answer(INPUTS, DIMENSIONS, fmt) for fmt in ("base64", "float")}
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port.send(listener.getsockname()[1])

    def handle(conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                request, buffer = buffer[:length], buffer[length:]
                fmt = json.loads(request).get("encoding_format") or "float"
                body = bodies[fmt]
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def http_part() -> None:
    import numpy as np
    import openai

    from cuca import CucaClient, ProviderEndpoint

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(child,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{parent.recv()}/v1"
    texts = [f"input number {i}" for i in range(INPUTS)]
    try:
        sdk = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
        sdk_cpu = best(
            lambda: sdk.embeddings.create(input=texts, model="text-embedding-3-small"),
            time.process_time,
        )
        sdk.close()

        async def ours() -> float:
            async with CucaClient(ProviderEndpoint.OPENAI, base_url=url, api_key="k") as client:
                return await abest(
                    lambda: client.embed(texts, model="text-embedding-3-small"),
                    time.process_time,
                )

        cuca_cpu = trio.run(ours)
    finally:
        server.kill()
        server.join()
    print(f"{INPUTS} inputs x {DIMENSIONS} dimensions, client CPU per call (best of {REPEATS}):")
    print(f"  openai SDK embeddings.create   {sdk_cpu * 1e3:8.2f} ms")
    print(f"  cuca client.embed               {cuca_cpu * 1e3:8.2f} ms")
    print(f"  ratio cuca / SDK                {cuca_cpu / sdk_cpu:8.2f}x")

    encoded = [
        base64.b64encode(struct.pack(f"<{DIMENSIONS}f", *([0.25] * DIMENSIONS))).decode()
    ] * INPUTS
    with_numpy = best(lambda: [np.frombuffer(base64.b64decode(e), dtype="<f4") for e in encoded])
    with_array = best(lambda: [array("f", base64.b64decode(e)) for e in encoded])
    print(f"reading {INPUTS} base64 vectors of {DIMENSIONS} floats (best of {REPEATS}):")
    print(f"  numpy.frombuffer               {with_numpy * 1e3:8.3f} ms")
    print(f"  array('f')                     {with_array * 1e3:8.3f} ms")
    print(f"  ratio array / numpy            {with_array / with_numpy:8.2f}x")


# -- 2. the local engine ---------------------------------------------------------------------

TEXTS = 1000
STEP = 512  # tokens per step: Llama's n_batch, the engine's embedding_batch


def one_step_each(texts: list[str], counts: list[int], n_seq_max: int) -> list[list[str]]:
    """``texts`` in calls of one step each: packed as ``Llama.embed`` packs its steps,
    so the calls together evaluate the same steps as one call of every text."""
    calls: list[list[str]] = [[]]
    rows = 0
    for text, count in zip(texts, counts, strict=True):
        if calls[-1] and (rows + count > STEP or len(calls[-1]) >= n_seq_max):
            calls.append([])
            rows = 0
        calls[-1].append(text)
        rows += count
    return calls


def local_part(texts_count: int, threads_count: int) -> None:
    """Both sides loaded once in this process with the same threads; every text is
    embedded once per side, in calls of one step each, the two sides alternating call
    by call (and which goes first alternating too), so a change in the machine's load
    falls on both. The figures: the totals (the whole of the texts), the medians of
    the calls, the median of each call's ratio, and whether every vector agrees bit
    for bit."""
    import statistics

    import llama_cpp

    from cuca import CucaClient, ProviderEndpoint
    from cuca.engine import LocalModel, default_model_path

    path = default_model_path()
    topics = ["cats", "rivers", "code"]
    texts = [f"Short text number {i} about {topics[i % 3]}." for i in range(texts_count)]
    threads = {"n_threads": threads_count, "n_threads_batch": threads_count}
    llama = llama_cpp.Llama(
        str(path),
        embedding=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
        n_ctx=STEP,
        n_batch=STEP,
        verbose=False,
        **threads,
    )
    counts = [len(llama.tokenize(text.encode())) for text in texts]
    calls = one_step_each(texts, counts, llama.context_params.n_seq_max)
    names = ("llama-cpp-python", "cuca")
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    same = True
    shown = (
        f"{texts_count} short texts ({sum(counts)} tokens, {len(calls)} steps), "
        f"SmolLM2-135M, mean pooling, {threads_count} thread(s)"
    )
    print(f"{shown}; load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    print("  each step: llama-cpp-python / cuca", flush=True)

    async def run() -> None:
        nonlocal same
        with LocalModel.load(path, embedding_batch=STEP, **threads) as model:
            async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:

                async def cuca_embed(batch: list[str]) -> Any:
                    return (await client.embed(batch, pooling="mean")).vectors

                async def llama_embed(batch: list[str]) -> Any:
                    return llama.embed(batch)

                sides = {"llama-cpp-python": llama_embed, "cuca": cuca_embed}
                for side in sides.values():  # the contexts made, the weights paged in
                    await side(calls[0])
                for number, batch in enumerate(calls):
                    order = names if number % 2 == 0 else names[::-1]
                    vectors = {}
                    for name in order:
                        wall, cpu = time.perf_counter(), time.process_time()
                        vectors[name] = await sides[name](batch)
                        walls[name].append(time.perf_counter() - wall)
                        cpus[name].append(time.process_time() - cpu)
                    ours = [list(vector) for vector in vectors["cuca"]]  # outside the timing
                    same = same and ours == vectors["llama-cpp-python"]
                    theirs, mine = walls["llama-cpp-python"][-1], walls["cuca"][-1]
                    their_cpu, my_cpu = cpus["llama-cpp-python"][-1], cpus["cuca"][-1]
                    print(
                        f"  step {number + 1:3}/{len(calls)}: {len(batch)} texts, wall "
                        f"{theirs:7.2f} s / {mine:7.2f} s ({mine / theirs:5.3f}x), CPU "
                        f"{their_cpu:6.2f} s / {my_cpu:6.2f} s ({my_cpu / their_cpu:5.3f}x)",
                        flush=True,
                    )

    try:
        trio.run(run)
    finally:
        llama.close()
    total = {name: sum(walls[name]) for name in names}
    wall_median = {name: statistics.median(walls[name]) for name in names}
    cpu_median = {name: statistics.median(cpus[name]) for name in names}
    pairs = zip(walls["cuca"], walls["llama-cpp-python"], strict=True)
    paired = statistics.median(mine / theirs for mine, theirs in pairs)
    pairs = zip(cpus["cuca"], cpus["llama-cpp-python"], strict=True)
    paired_cpu = statistics.median(mine / theirs for mine, theirs in pairs)
    print(f"{shown} (load average {os.getloadavg()[0]:.2f} at the end):")
    print("                                  all texts   median call   median call CPU")
    for label, name in (
        ("llama-cpp-python Llama.embed", names[0]),
        ("cuca client.embed", names[1]),
    ):
        print(
            f"  {label:30} {total[name]:8.2f} s  {wall_median[name]:10.3f} s  "
            f"{cpu_median[name]:12.3f} s"
        )
    ratio = wall_median["cuca"] / wall_median["llama-cpp-python"]
    cpu_ratio = cpu_median["cuca"] / cpu_median["llama-cpp-python"]
    print(
        f"  ratio cuca / llama-cpp-python  {total['cuca'] / total[names[0]]:8.3f}x  "
        f"{ratio:10.3f}x  {cpu_ratio:12.3f}x"
    )
    print(f"  median of the calls' ratios    {paired:8.3f}x  {'':10}   {paired_cpu:12.3f}x")
    print(f"  vectors equal bit for bit      {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="only the OpenAI wire part")
    parser.add_argument("--local", action="store_true", help="only the local engine part")
    parser.add_argument("--texts", type=int, default=TEXTS, help="texts of the local part")
    parser.add_argument(
        "--threads", type=int, default=THREADS, help="llama.cpp threads, both sides (local)"
    )
    args = parser.parse_args()
    both = not args.http and not args.local
    if args.http or both:
        http_part()
    if args.local or both:
        local_part(args.texts, args.threads)


if __name__ == "__main__":
    main()
