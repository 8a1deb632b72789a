"""Benchmark streaming a chat completion over loopback, coalesced and paced.

Run ``python tests/benchmarks/bench_openai_stream.py [--chunks N]``: one command, one
run. A replay server in a child process serves the same OpenAI transcript to four
clients in turn:

- cuca (``CucaClient`` under trio), fused (the default) and as actors (``fused=False``:
  every point of the turn its own task, on memory channels; reported, not targeted),
- the official openai SDK (``AsyncOpenAI`` under asyncio, its native loop),
- LiteLLM (``litellm.acompletion(stream=True)`` under asyncio),
- the floor: httpx streaming + httpx-sse + ``json.loads`` in a plain loop (under trio).

The Responses route (``POST /v1/responses``) is measured in the same run: the server
answers it with one transcript of as many ``response.output_text.delta`` events, read
by cuca (``OpenAiConfig(api=OpenAiApi.RESPONSES)``) and by the SDK's
``client.responses.create(stream=True)``.

Each client streams a transcript of a tenth of the chunks and one of all of them,
``REPEATS`` times each after a warm-up; the best run of each is kept. CPU is this
process's ``time.process_time`` (the server's CPU is not counted). From the two lengths:
the fixed CPU cost of a turn (event loop, client, TLS context, connect) and the CPU per
1,000 chunks (the slope), reported apart; whether the client received every chunk at both
lengths; text blocks per second (wall clock, long stream). Then cuca's ratios of the
slopes against the targets (≥3x the openai SDK, ≥10x LiteLLM, at most 0.6x the floor's
CPU: cuca decodes each chunk with msgspec into a typed struct where the floor calls
``json.loads``). Then where a cuca chunk's CPU goes: SSE framing, JSON and the decoder
timed alone in process, and the rest of the turn's slope.

Those transcripts go out in 64 KiB writes, so one read carries hundreds of frames. The
paced case is how a real token stream arrives: 4,000 chunks, one SSE frame per write,
one write every 0.3 ms, so nearly every read carries one frame and every hop of a turn
is paid per token. cuca (fused and as actors), the floor and the openai SDK stream it in
alternated rounds after a warm-up (``--rounds``, ``PACED_ROUNDS`` by default: each round
runs every client once, so a busy machine slows them alike); a client's figure is its
median CPU time around the whole turn, a ratio the median of the ratios within a round.
Targets (issue 33): cuca's CPU per chunk at most 0.91x the floor's, and at least 2.7x
less than the openai SDK's. ``--paced-only`` runs this case alone; ``--coalesced-only``
the coalesced case of cuca and the floor alone (what ``compare_commits.py`` needs for
that target).

Never part of pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

CHUNKS = 10_000
REPEATS = 5
PACED_CHUNKS = 4_000
PACED_ROUNDS = 5
PACE = 0.0003
MODEL = "gpt-4o-2024-08-06"
API_KEY = "sk-bench-not-a-real-key"
WORDS = ["Hello", " world", ",", " the", " quick", " brown", " fox", " jumps", " ü", " 日本"]


def frames(chunks: int = CHUNKS) -> list[bytes]:
    """``chunks`` text deltas in OpenAI's recorded shape, a finish chunk, usage, [DONE]:
    one SSE frame each."""
    head = (
        '{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk",'
        '"created":1741569952,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_f9f4fb6dbf",'
        '"choices":[{"index":0,"delta":'
    )
    tail = ',"logprobs":null,"finish_reason":%s}]}'
    lines = [f'data: {head}{{"role":"assistant","content":"","refusal":null}}{tail % "null"}']
    for i in range(chunks):
        content = json.dumps(WORDS[i % len(WORDS)], ensure_ascii=False)
        lines.append(f'data: {head}{{"content":{content}}}{tail % "null"}')
    stop = tail % '"stop"'
    lines.append(f"data: {head}{{}}{stop}")
    usage = {"prompt_tokens": 12, "completion_tokens": chunks, "total_tokens": chunks + 12}
    lines.append(
        'data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk",'
        f'"created":1741569952,"model":"{MODEL}","choices":[],"usage":{json.dumps(usage)}}}'
    )
    lines.append("data: [DONE]")
    return [f"{frame}\n\n".encode() for frame in lines]


def transcript(chunks: int = CHUNKS) -> bytes:
    """The whole body of :func:`frames`."""
    return b"".join(frames(chunks))


def responses_transcript(chunks: int = CHUNKS) -> bytes:
    """``chunks`` ``response.output_text.delta`` events in OpenAI's shape (field names from
    the SDK's ``types/responses/``), between the item events and ``response.completed``."""
    rid, mid = "resp_68af4030592c81938ec0a5fbab4a3e9f", "msg_68af4032a6e88193a1a3ef3f2b3c0f41"
    response: dict[str, Any] = {
        "id": rid,
        "object": "response",
        "created_at": 1756315696,
        "model": MODEL,
        "status": "in_progress",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    item = {"id": mid, "type": "message", "status": "in_progress", "role": "assistant"}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
    ]
    where = {"item_id": mid, "output_index": 0, "content_index": 0}
    for i in range(chunks):
        delta = {"delta": WORDS[i % len(WORDS)], "logprobs": []}
        events.append({"type": "response.output_text.delta", **where, **delta})
    usage = {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": chunks,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": chunks + 12,
    }
    done = {**response, "status": "completed", "usage": usage}
    events.append({"type": "response.completed", "response": done})
    frames = []
    for n, event in enumerate(events):
        data = json.dumps({**event, "sequence_number": n}, ensure_ascii=False)
        frames.append(f"event: {event['type']}\ndata: {data}\n\n")
    return "".join(frames).encode()


# -- the server (child process) ------------------------------------------------------


def lengths(chunks: int) -> tuple[int, int]:
    """The two stream lengths measured: a tenth of ``chunks``, and ``chunks``. The CPU
    time of the two gives a client's fixed cost (event loop, client, TLS context, connect)
    and its per-chunk slope apart."""
    return max(1, chunks // 10), chunks


async def serve(chunks: int) -> None:
    """Serve both lengths: a path starting ``/n<length>`` gets a stream of that length."""
    from cuca.testing import RecordedRequest, Reply, open_replay_server

    replies = {
        (n, route): Reply(body=make(n))
        for n in lengths(chunks)
        for route, make in (("chat", transcript), ("responses", responses_transcript))
    }

    paced_frames = frames(PACED_CHUNKS)
    paced = Reply(b"".join(paced_frames), chunks=[len(f) for f in paced_frames], delay=PACE)

    def choose(request: RecordedRequest) -> Reply:
        if request.path.startswith("/paced/"):
            return paced
        length = int(request.path.split("/")[1].removeprefix("n"))
        route = "responses" if request.path.endswith("/responses") else "chat"
        return replies[length, route]

    async with open_replay_server(choose) as server:
        print(server.url, flush=True)
        await trio.sleep_forever()


def start_server(chunks: int | None = None) -> tuple[subprocess.Popen[str], str]:
    """This file's loopback server in a child process, streaming ``chunks`` chunks
    (``--chunks``' figure by default), and its URL; the other benchmarks use it too."""
    count = CHUNKS if chunks is None else chunks
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(count)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


# -- the clients ---------------------------------------------------------------------

MESSAGES: list[Any] = [{"role": "user", "content": "Say hello many times."}]


async def run_cuca(url: str, fused: bool = True) -> int:
    from cuca import CucaClient, ProviderEndpoint, Text, UnifiedRequest

    request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
    blocks = 0
    base_url = f"{url}/v1"
    mode = {} if fused else {"fused": False}  # the default: commits before fused= ran too
    async with CucaClient(ProviderEndpoint.OPENAI, base_url=base_url, api_key=API_KEY, **mode) as c:
        async with c.generate_stream(request) as stream:
            async for item in stream:
                if isinstance(item, Text):
                    blocks += 1
    return blocks


async def run_cuca_responses(url: str) -> int:
    from cuca import CucaClient, OpenAiApi, OpenAiConfig, ProviderEndpoint, Text, UnifiedRequest

    request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
    config = OpenAiConfig(api=OpenAiApi.RESPONSES)
    blocks = 0
    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key=API_KEY, provider_config=config
    ) as c:
        async with c.generate_stream(request) as stream:
            async for item in stream:
                if isinstance(item, Text):
                    blocks += 1
    return blocks


async def run_floor(url: str) -> int:
    import httpx
    from httpx_sse import aconnect_sse

    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    blocks = 0
    async with httpx.AsyncClient(timeout=None) as client:
        async with aconnect_sse(client, "POST", f"{url}/v1/chat/completions", json=body) as es:
            async for sse in es.aiter_sse():
                if sse.data == "[DONE]":
                    break
                chunk = json.loads(sse.data)
                for choice in chunk["choices"]:
                    if choice["delta"].get("content"):
                        blocks += 1
    return blocks


async def run_openai(url: str) -> int:
    from openai import AsyncOpenAI

    blocks = 0
    async with AsyncOpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0) as client:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                blocks += 1
    return blocks


async def run_openai_responses(url: str) -> int:
    from openai import AsyncOpenAI

    blocks = 0
    async with AsyncOpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0) as client:
        stream = await client.responses.create(
            model=MODEL, input="Say hello many times.", stream=True
        )
        async for event in stream:
            if event.type == "response.output_text.delta" and event.delta:
                blocks += 1
    return blocks


async def run_litellm(url: str) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price fetch from GitHub
    import litellm

    litellm.telemetry = False
    blocks = 0
    response: Any = await litellm.acompletion(
        model=f"openai/{MODEL}",
        api_base=f"{url}/v1",
        api_key=API_KEY,
        messages=MESSAGES,
        stream=True,
    )
    async for chunk in response:
        if chunk.choices and chunk.choices[0].delta.content:
            blocks += 1
    return blocks


Runner = Callable[[Callable[[str], Awaitable[int]], str], int]


def on_trio(client: Callable[[str], Awaitable[int]], url: str) -> int:
    return trio.run(client, url)


def on_asyncio(client: Callable[[str], Awaitable[int]], url: str) -> int:
    return asyncio.run(client(url))  # type: ignore[arg-type]


CLIENTS: list[tuple[str, Callable[[str], Awaitable[int]], Runner]] = [
    ("cuca", run_cuca, on_trio),
    ("cuca (actors)", functools.partial(run_cuca, fused=False), on_trio),
    ("floor (httpx + httpx-sse + json)", run_floor, on_trio),
    ("openai SDK", run_openai, on_asyncio),
    ("LiteLLM", run_litellm, on_asyncio),
    ("cuca (responses)", run_cuca_responses, on_trio),
    ("openai SDK (responses)", run_openai_responses, on_asyncio),
]


def measure(
    runner: Runner,
    client: Callable[[str], Awaitable[int]],
    url: str,
    repeats: int = REPEATS,
) -> dict[str, float]:
    """The run with the least CPU of ``repeats``, after a warm-up."""
    runner(client, url)  # warm-up: imports, connection setup, caches
    runs: list[dict[str, float]] = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        blocks = runner(client, url)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        runs.append({"blocks": blocks, "wall": wall, "cpu": cpu})
    return min(runs, key=lambda run: run["cpu"])


PACED_CLIENTS = ("cuca", "cuca (actors)", "floor (httpx + httpx-sse + json)", "openai SDK")


COALESCED_ONLY = ("cuca", "floor (httpx + httpx-sse + json)")
"""The clients of ``--coalesced-only``: the two the coalesced target compares."""


def main(
    paced_only: bool = False, rounds: int = PACED_ROUNDS, coalesced_only: bool = False
) -> None:
    process, url = start_server()
    results: dict[str, dict[int, dict[str, float]]] = {}
    paced: dict[str, list[dict[str, float]]] = {}
    try:
        for name, client, runner in CLIENTS if not paced_only else ():
            if coalesced_only and name not in COALESCED_ONLY:
                continue
            try:
                results[name] = {n: measure(runner, client, f"{url}/n{n}") for n in lengths(CHUNKS)}
            except Exception as exc:  # a missing SDK should not hide the other rows
                print(f"{name}: failed: {type(exc).__name__}: {exc}")
        if not coalesced_only:
            paced = measure_paced(f"{url}/paced", rounds)
    finally:
        process.terminate()
        process.wait()
    if not paced_only:
        report(results)
    if not paced_only and not coalesced_only:
        report_split(results)
        report_encoding()
    if not coalesced_only:
        report_paced(paced, rounds)


def measure_paced(url: str, rounds: int) -> dict[str, list[dict[str, float]]]:
    """Each paced client's runs: a warm-up each, then ``rounds`` rounds in which every
    client streams the paced transcript once, in turn."""
    chosen = []
    for name, client, runner in CLIENTS:
        if name not in PACED_CLIENTS:
            continue
        try:
            runner(client, url)  # warm-up: imports, connection setup, caches
        except Exception as exc:  # an older cuca (compare_commits.py) may lack a mode
            print(f"{name}: failed: {type(exc).__name__}: {exc}")
            continue
        chosen.append((name, client, runner))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in chosen}
    for _ in range(rounds):
        for name, client, runner in chosen:
            wall, cpu = time.perf_counter(), time.process_time()
            blocks = runner(client, url)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            runs[name].append({"blocks": blocks, "wall": wall, "cpu": cpu})
    return runs


def split_cost(runs: dict[int, dict[str, float]]) -> tuple[float, float]:
    """(fixed cost in CPU ms, CPU ms per 1,000 chunks) from the runs at the two lengths."""
    short, long = lengths(CHUNKS)
    slope = (runs[long]["cpu"] - runs[short]["cpu"]) * 1000 / ((long - short) / 1000)
    return runs[short]["cpu"] * 1000 - slope * short / 1000, slope


def report(results: dict[str, dict[int, dict[str, float]]]) -> None:
    short, long = lengths(CHUNKS)
    print(f"{short:,} and {long:,} chunks over loopback, best of {REPEATS} runs each")
    print("(CPU = this process; fixed cost and per-chunk slope from the two lengths)\n")
    print(f"{'client':34} {'every chunk':>11} {'blocks/s':>10}", end="")
    print(f" {'fixed ms':>9} {'ms/1k chunks':>13}")
    slope: dict[str, float] = {}
    for name, runs in results.items():
        fixed, slope[name] = split_cost(runs)
        complete = all(int(runs[n]["blocks"]) == n for n in (short, long))
        got = "yes" if complete else f"NO ({int(runs[long]['blocks'])})"
        rate = runs[long]["blocks"] / runs[long]["wall"]
        print(f"{name:34} {got:>11} {rate:>10,.0f} {fixed:>9.1f} {slope[name]:>13.2f}")
    print()
    targets = [
        ("cuca", "openai SDK", "openai SDK CPU / cuca CPU", 3.0, True),
        ("cuca", "LiteLLM", "LiteLLM CPU / cuca CPU", 10.0, True),
        ("cuca", "floor (httpx + httpx-sse + json)", "cuca CPU / floor CPU", 0.6, False),
        (
            "cuca (actors)",
            "floor (httpx + httpx-sse + json)",
            "actors CPU / floor CPU",
            None,
            False,
        ),
        ("cuca (responses)", "openai SDK (responses)", "responses: SDK CPU / cuca CPU", 3.0, True),
    ]
    print("ratios of the per-chunk slopes:")
    for ours, name, label, target, higher in targets:
        if name not in slope or ours not in slope:
            continue
        cuca = slope[ours]
        ratio = slope[name] / cuca if higher else cuca / slope[name]
        print(f"{label:30} {ratio:6.2f}x  {verdict(ratio, target, higher)}")


def verdict(ratio: float, target: float | None, higher: bool) -> str:
    """``(target ... : met)``, or ``(reported)`` for a row without a target."""
    if target is None:
        return "(reported, no target)"
    ok = ratio >= target if higher else ratio <= target
    sign = ">=" if higher else "<="
    return f"(target {sign} {target:g}x: {'met' if ok else 'MISSED'})"


def per_chunk_split(chunks: int = CHUNKS, repeats: int = 7) -> dict[str, float]:
    """CPU µs per chunk of the in-process steps of a coalesced cuca turn, each timed alone
    on the transcript in 64 KiB reads (best of ``repeats``): SSE framing; JSON alone, as
    the floor decodes it (``json.loads``) and as cuca does (``msgspec`` into the chunk
    struct); the decoder whole (JSON, reading the chunk, making the blocks)."""
    from cuca import ProviderEndpoint, UnifiedRequest
    from cuca.providers.base import ClientSettings
    from cuca.providers.chat.decode import _CHUNK  # the decoder's own typed decoding
    from cuca.providers.registry import adapter_for

    body = transcript(chunks)
    reads = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    settings = ClientSettings(ProviderEndpoint.OPENAI, "http://127.0.0.1:9/v1", API_KEY)
    adapter = adapter_for(settings)
    request = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")

    def best(step: Callable[[], object]) -> float:
        times = []
        for _ in range(repeats):
            cpu = time.process_time()
            step()
            times.append(time.process_time() - cpu)
        return min(times) * 1e6 / chunks

    def frame() -> list[Any]:
        framer = adapter.new_framer()
        return [event for read in reads for event in framer.feed(read)] + framer.close()

    events = frame()
    data = [event.data for event in events if event.data != "[DONE]"]

    def decode() -> None:
        decoder = adapter.new_decoder(request)
        for event in events:
            decoder.feed(event)
        decoder.close()

    def each(loads: Callable[[str], object]) -> Callable[[], None]:
        def run() -> None:
            for text in data:
                loads(text)  # each result dropped at once, as a turn drops its chunks

        return run

    return {
        "SSE framing": best(frame),
        "JSON alone, json.loads (the floor's)": best(each(json.loads)),
        "JSON alone, msgspec into the struct (cuca's)": best(each(_CHUNK.decode)),
        "decoder (cuca's JSON + reading + blocks)": best(decode),
    }


def report_split(results: dict[str, dict[int, dict[str, float]]]) -> None:
    """Where a coalesced cuca chunk's CPU goes: the in-process steps timed alone, and
    the rest of the turn's slope (transport, pipeline hops, the consumer's loop)."""
    if "cuca" not in results:
        return
    split = per_chunk_split()
    _, slope = split_cost(results["cuca"])
    print(f"\nper chunk, in process ({CHUNKS:,} chunks in 64 KiB reads), CPU µs:")
    for name, cost in split.items():
        print(f"  {name:46} {cost:6.2f}")
    rest = slope - split["SSE framing"] - split["decoder (cuca's JSON + reading + blocks)"]
    print(f"  {'rest of the turn (transport, pipeline, loop)':46} {rest:6.2f}")
    print(f"  {'cuca, whole turn (the slope above)':46} {slope:6.2f}")
    share = split["JSON alone, msgspec into the struct (cuca's)"] / slope
    print(f"  JSON is {share:.0%} of cuca's chunk")


def report_encoding(repeats: int = 200) -> None:
    """What encoding the request body costs, as cuca does it (``json.dumps``, in
    ``HttpRequest.body_bytes``) and with msgspec, for this benchmark's request and for a
    100-step tool conversation; and whether the two write the same bytes."""
    import msgspec

    from cuca import ProviderEndpoint, ToolCall, UnifiedRequest
    from cuca.providers.base import ClientSettings
    from cuca.providers.registry import adapter_for

    settings = ClientSettings(ProviderEndpoint.OPENAI, "http://127.0.0.1:9/v1", API_KEY)
    adapter = adapter_for(settings)
    short = UnifiedRequest.new(MODEL).add_user_message("Say hello many times.")
    long = short.add_tool("get_weather", "The weather in a city.", {"type": "object"})
    for step in range(100):
        call = ToolCall(f"call_{step}", "get_weather", {"city": "Edinburgh", "units": "c"})
        long = long.add_user_message("And the weather in Edinburgh? " * 10)
        long = long.add_assistant_message(call).add_tool_result(call.id, "12C, rain ü 日本")
    print("\nrequest body encoding, CPU µs per request (best of many):")
    for name, request in (("this benchmark's request", short), ("100 tool steps", long)):
        wire = adapter.encode(request)
        timings = []
        for encode in (wire.body_bytes, functools.partial(msgspec.json.encode, wire.body)):
            runs = []
            for _ in range(repeats):
                cpu = time.process_time()
                encode()
                runs.append(time.process_time() - cpu)
            timings.append(min(runs) * 1e6)
        same = wire.body_bytes() == msgspec.json.encode(wire.body)
        size = len(wire.body_bytes())
        print(
            f"  {name:26} {size:>7,} bytes  json.dumps (cuca) {timings[0]:7.1f}"
            f"  msgspec {timings[1]:6.1f}  same bytes: {'yes' if same else 'no'}"
        )


def report_paced(runs: dict[str, list[dict[str, float]]], rounds: int) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n{PACED_CHUNKS:,} chunks paced by the server (one frame per write, every "
        f"{PACE * 1000:g} ms), medians of {rounds} alternated rounds (CPU = this process; "
        f"load average {load:.1f} at the end)\n"
    )
    print(f"{'client':34} {'blocks':>7} {'wall s':>7} {'CPU µs/chunk':>13}")
    per_chunk: dict[str, list[float]] = {}
    for name, mine in runs.items():
        per_chunk[name] = [r["cpu"] * 1e6 / PACED_CHUNKS for r in mine]
        blocks = min(int(r["blocks"]) for r in mine)
        wall = statistics.median(r["wall"] for r in mine)
        print(f"{name:34} {blocks:>7} {wall:>7.2f} {statistics.median(per_chunk[name]):>13.1f}")
    if "cuca" not in per_chunk:
        return
    print("\nratios (the median of the ratios within a round):")
    floor = "floor (httpx + httpx-sse + json)"
    targets: list[tuple[str, str, str, float | None, bool]] = [
        ("cuca", floor, "paced: cuca CPU / floor CPU", 0.91, False),
        ("cuca (actors)", floor, "paced: actors CPU / floor CPU", None, False),
        ("cuca", "openai SDK", "paced: openai SDK CPU / cuca CPU", 2.7, True),
    ]
    for ours, name, label, target, higher in targets:
        if name not in per_chunk or ours not in per_chunk:
            continue
        pairs = zip(per_chunk[ours], per_chunk[name], strict=True)
        ratio = statistics.median(them / us if higher else us / them for us, them in pairs)
        print(f"{label:34} {ratio:6.2f}x  {verdict(ratio, target, higher)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        trio.run(serve, int(sys.argv[2]))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        parser.add_argument("--chunks", type=int, default=CHUNKS)
        parser.add_argument("--rounds", type=int, default=PACED_ROUNDS, help="paced rounds")
        parser.add_argument("--paced-only", action="store_true", help="the paced case alone")
        parser.add_argument(
            "--coalesced-only", action="store_true", help="the coalesced case, cuca and the floor"
        )
        args = parser.parse_args()
        CHUNKS = args.chunks  # issue 2's pipeline-overhead run uses 20,000
        main(args.paced_only, args.rounds, args.coalesced_only)
