"""Which llama.cpp configuration can keep the exact mode exact, and what each costs.

Run it from the repository root::

    .venv/bin/python tests/benchmarks/bench_engine_kernels.py [tokens]
    .venv/bin/python tests/benchmarks/bench_engine_kernels.py --threads [tokens]

It drives cuca's llama.cpp backend directly (no scheduler, no stream) on SmolLM2-135M,
one thread, and prints for three configurations:

* whether the last token's logits come out the same, bit for bit, when the same prompt
  is evaluated in different steps (one step; two steps; steps of 63; a last step of
  one row; a tail of one row per step, as generation evaluates tokens);
* the time to evaluate a ``tokens``-token prompt (steps as the configuration allows),
  then a 20-token step after it (a warm turn's new message), then one token at a time
  (decoding at that context).

The configurations: flash attention in steps of at most 63 rows (its per-row kernel,
the exact mode until it was replaced), flash attention in steps of 512 (its tiled
kernel from 64 rows on), and no flash attention in steps of 512 (llama-cpp-python's, and
cuca's today). ``--threads`` instead times that prompt and decoding with 1 and 2
threads (no flash attention), as the machine is and while another process spins one
core: what the thread defaults cost. Never part of the test suite; the times vary with
the machine's load.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cuca.engine import default_model_path
from cuca.engine.backend import LlamaBackend

PARAGRAPH = (
    "The archive holds letters, ledgers and maps from the harbour town, sorted by year. "
    "Each entry names the ship, its cargo, the weather on arrival and the clerk on duty. "
)
CONFIGURATIONS = (
    ("flash attention, steps of 63", True, 63),
    ("flash attention, steps of 512", True, 512),
    ("no flash attention, steps of 512", False, 512),
)


def backend(flash: bool, step: int) -> LlamaBackend:
    return LlamaBackend(
        str(default_model_path()),
        n_ctx=4096,
        n_batch=512,
        n_ubatch=step,
        n_threads=1,
        n_threads_batch=1,
        flash_attention=flash,
    )


def evaluate(model: LlamaBackend, tokens: list[int], steps: list[int], start: int = 0) -> str:
    """Evaluate ``tokens[start:]`` in steps of the given sizes; a digest of the last
    token's logits."""
    batch = model.batch()
    position = start
    for size in steps:
        part = tokens[position : position + size]
        batch.fill([(t, position + i, 0, i == len(part) - 1) for i, t in enumerate(part)])
        if model.decode(batch) != 0:
            raise RuntimeError("llama_decode failed")
        position += size
    ll, ctx = model._ll, model._ctx  # a probe: it reads the backend's own context
    n_vocab = ll.llama_vocab_n_tokens(model._vocab)
    logits = ctypes.string_at(ll.llama_get_logits_ith(ctx, len(part) - 1), n_vocab * 4)
    return hashlib.sha1(logits).hexdigest()[:10]


def split(total: int, size: int) -> list[int]:
    return [size] * (total // size) + ([total % size] if total % size else [])


def threads(length: int) -> None:
    """Prefill and decoding with 1 and 2 threads, then the same beside a spinning core."""
    print(f"SmolLM2-135M Q4_1; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    for busy in (False, True):
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            for count in (1, 2):
                model = LlamaBackend(
                    str(default_model_path()), n_ctx=4096, n_batch=512, n_ubatch=512,
                    n_threads=count, n_threads_batch=count, flash_attention=False,
                )  # fmt: skip
                tokens = model.tokenize(PARAGRAPH * (length // 30 + 2), special=False)
                evaluate(model, tokens, [8])
                model.clear(0)
                begin = time.perf_counter()
                evaluate(model, tokens, split(length, 512))
                cold = time.perf_counter() - begin
                begin = time.perf_counter()
                evaluate(model, tokens, [1] * 32, start=length)
                rate = 32 / (time.perf_counter() - begin)
                where = "one core spinning" if busy else "as the machine is"
                print(
                    f"{where}, {count} thread(s): {length}-token prompt {cold:.2f} s, "
                    f"decoding {rate:.1f} tok/s"
                )
                model.close()
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
    print(f"load at the end {os.getloadavg()[0]:.2f}")


def main() -> None:
    if sys.argv[1:2] == ["--threads"]:
        threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
        return
    length = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(f"SmolLM2-135M Q4_1, 1 thread; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    schedules = {
        "one step": [300],
        "200 + 100": [200, 100],
        "steps of 63": split(300, 63),
        "299 + 1": [299, 1],
        "200 + one by one": [200] + [1] * 100,
    }
    for label, flash, step in CONFIGURATIONS:
        model = backend(flash, step)
        tokens = model.tokenize(PARAGRAPH * (length // 30 + 2), special=False)[: length + 40]
        digests = {}
        for name, steps in schedules.items():
            model.clear(0)
            digests[name] = evaluate(model, tokens, [min(s, 512) for s in steps])
        groups: dict[str, list[str]] = {}
        for name, digest in digests.items():
            groups.setdefault(digest, []).append(name)
        same = "; ".join(" = ".join(names) for names in groups.values())
        model.clear(0)
        evaluate(model, tokens, [8])  # page the weights in
        model.clear(0)
        begin = time.perf_counter()
        evaluate(model, tokens, split(length, min(step, 512)))
        cold = time.perf_counter() - begin
        begin = time.perf_counter()
        evaluate(model, tokens, [20], start=length)
        warm = time.perf_counter() - begin
        begin = time.perf_counter()
        evaluate(model, tokens, [1] * 10, start=length + 20)
        decode = (time.perf_counter() - begin) / 10
        print(f"\n{label}")
        print(f"  same logits (300-token prompt): {same}")
        print(
            f"  {length}-token prompt {cold:.2f} s, then a 20-token step {warm:.3f} s, "
            f"then {decode * 1000:.1f} ms per token"
        )
        model.close()
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
