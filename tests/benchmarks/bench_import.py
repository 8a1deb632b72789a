"""Benchmark the cost of ``import cuca`` and of a first turn in a fresh process.

Run ``python tests/benchmarks/bench_import.py [--runs N]``. Each row is the median wall
time of ``python -c "<statement>"`` over N fresh processes (10 by default), the rows
taken in turns so that a busy machine slows them all alike:

- cuca: ``import cuca``, and ``from cuca import CucaClient, UnifiedRequest, ...`` (the
  names a first program touches);
- the floor: ``import httpx, trio, attrs, cattrs``, cuca's own dependencies alone;
- the openai, anthropic and litellm SDKs (a row is skipped when it is not installed);
- a first turn: import, client, and one OpenAI-shaped turn against a replay server
  running in another process.

Reported: each median, its ratio to the floor, and cuca's target (within 1.15x of the
floor). Never part of pass/fail.

An editable install (``pip install -e``, as ``make test`` does) adds setuptools' import
finder to every ``import cuca``. To measure what a user's regular install costs, put
one on the path: ``pip install --no-deps --target /tmp/site .`` then
``PYTHONPATH=/tmp/site python tests/benchmarks/bench_import.py``.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import time

import trio

RUNS = 10
TARGET = 1.15

FIRST_TURN = """
import sys, trio
from cuca import CucaClient, ProviderEndpoint, UnifiedRequest

async def main(url):
    request = UnifiedRequest.new("gpt-4o-mini").add_user_message("Say hello.")
    async with CucaClient(ProviderEndpoint.OPENAI, base_url=url + "/v1", api_key="sk-x") as c:
        done = await c.generate(request)
    assert done.text, done

trio.run(main, sys.argv[1])
"""

BODY = (
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-mini",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},'
    b'"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-mini",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}\n\n'
    b"data: [DONE]\n\n"
)


async def serve() -> None:
    from cuca.testing import Reply, open_replay_server

    async with open_replay_server(Reply(body=BODY)) as server:
        print(server.url, flush=True)
        await trio.sleep_forever()


def rows() -> list[tuple[str, list[str]]]:
    out = [
        ("floor: import httpx, trio, attrs, cattrs", ["-c", "import httpx, trio, attrs, cattrs"]),
        ("import cuca", ["-c", "import cuca"]),
        (
            "from cuca import CucaClient, UnifiedRequest, ...",
            ["-c", "from cuca import CucaClient, ProviderEndpoint, Text, UnifiedRequest"],
        ),
    ]
    for sdk in ("openai", "anthropic", "litellm"):
        if importlib.util.find_spec(sdk) is not None:
            out.append((f"import {sdk}", ["-c", f"import {sdk}"]))
        else:
            print(f"({sdk} is not installed: its row is skipped)")
    return out


# LiteLLM fetches its price map from GitHub on import unless told to use its bundled copy;
# with no network that fetch retries with sleeps, which would be timed as import cost.
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - start


def main(runs: int) -> None:
    argv = [sys.executable, __file__, "--serve"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        table = [*rows(), ("first turn (import + client + one turn)", ["-c", FIRST_TURN, url])]
        times: dict[str, list[float]] = {name: [] for name, _ in table}
        for _, statement in table:  # warm the OS file cache once
            timed(statement)
        for _ in range(runs):
            for name, statement in table:
                times[name].append(timed(statement))
    finally:
        server.terminate()
        server.wait()
    report(times, runs)


def report(times: dict[str, list[float]], runs: int) -> None:
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = next(iter(medians.values()))
    print(f"median wall time of {runs} fresh processes each\n")
    print(f"{'statement':50} {'median s':>9} {'/ floor':>8}")
    for name, median in medians.items():
        print(f"{name:50} {median:9.3f} {median / floor:7.2f}x")
    ratio = medians["import cuca"] / floor
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"\nimport cuca / floor: {ratio:.2f}x (target <= {TARGET}x: {verdict})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        trio.run(serve)
    else:
        main(int(sys.argv[2]) if sys.argv[1:2] == ["--runs"] else RUNS)
