"""Benchmark embeddings: the client's CPU on the OpenAI wire, and the local engine.

Run ``python tests/benchmarks/bench_embeddings.py`` (``--local`` or ``--http`` for one
part): one command, best of ``REPEATS`` after a warm-up. Never part of pass/fail.

1. ``--http``: 100 inputs whose vectors have 1536 dimensions from a loopback server
   speaking OpenAI's ``/v1/embeddings`` (one answer, built once, in the format each
   client asks for: cuca asks for ``encoding_format: "base64"``, the openai SDK asks for
   base64 too when no format is given and decodes it with numpy into lists). The
   figure is the client process's CPU time per call (``time.process_time``; the server
   runs in another process), cuca's ``client.embed`` against the SDK's
   ``embeddings.create``. Also: the two ways of reading a base64 vector (numpy's
   ``frombuffer`` and ``array("f")``), which chose cuca's vector type.
2. ``--local``: 1,000 short texts on SmolLM2-135M (mean pooling), cuca's
   ``client.embed`` against llama-cpp-python's ``Llama.embed``, the same threads and
   step size (wall time, best of ``LOCAL_REPEATS``: the work is in llama.cpp's threads).
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
LOCAL_REPEATS = 3  # a call is a second or more of llama.cpp's work
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
        vector: Any = base64.b64encode(raw).decode() if encoding == "base64" else list(
            struct.unpack(f"<{dimensions}f", raw)
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
    with_numpy = best(
        lambda: [np.frombuffer(base64.b64decode(e), dtype="<f4") for e in encoded]
    )
    with_array = best(lambda: [array("f", base64.b64decode(e)) for e in encoded])
    print(f"reading {INPUTS} base64 vectors of {DIMENSIONS} floats (best of {REPEATS}):")
    print(f"  numpy.frombuffer               {with_numpy * 1e3:8.3f} ms")
    print(f"  array('f')                     {with_array * 1e3:8.3f} ms")
    print(f"  ratio array / numpy            {with_array / with_numpy:8.2f}x")


# -- 2. the local engine ---------------------------------------------------------------------

TEXTS = 1000


def local_part() -> None:
    import llama_cpp

    from cuca import CucaClient, ProviderEndpoint
    from cuca.engine import LocalModel, default_model_path

    path = default_model_path()
    topics = ["cats", "rivers", "code"]
    texts = [f"Short text number {i} about {topics[i % 3]}." for i in range(TEXTS)]
    threads = {"n_threads": THREADS, "n_threads_batch": THREADS}
    llama = llama_cpp.Llama(
        str(path),
        embedding=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
        n_ctx=512,
        n_batch=512,
        verbose=False,
        **threads,
    )
    theirs = best(lambda: llama.embed(texts), repeats=LOCAL_REPEATS)
    reference = llama.embed(texts)
    llama.close()

    async def ours() -> tuple[float, Any]:
        with LocalModel.load(path, **threads) as model:
            async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
                run = lambda: client.embed(texts, pooling="mean")  # noqa: E731
                elapsed = await abest(run, repeats=LOCAL_REPEATS)
                return elapsed, await client.embed(texts, pooling="mean")

    mine, result = trio.run(ours)
    same = [list(v) for v in result.vectors] == reference
    shown = f"{TEXTS} short texts, SmolLM2-135M, mean pooling, {THREADS} threads"
    print(f"{shown} (best of {LOCAL_REPEATS}):")
    print(f"  llama-cpp-python Llama.embed   {theirs * 1e3:8.1f} ms")
    print(f"  cuca client.embed (local)      {mine * 1e3:8.1f} ms")
    print(f"  ratio cuca / llama-cpp-python  {mine / theirs:8.3f}x")
    print(f"  vectors equal bit for bit      {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="only the OpenAI wire part")
    parser.add_argument("--local", action="store_true", help="only the local engine part")
    args = parser.parse_args()
    both = not args.http and not args.local
    if args.http or both:
        http_part()
    if args.local or both:
        local_part()


if __name__ == "__main__":
    main()
