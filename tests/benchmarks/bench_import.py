"""Benchmark the cost of ``import cuca`` and of a first turn in a fresh process.

Run ``python tests/benchmarks/bench_import.py [--runs N]``. Each row is the median wall
time of ``python -c "<statement>"`` over N fresh processes (10 by default), the rows
taken in turns so that a busy machine slows them all alike:

- cuca: ``import cuca``, and ``from cuca import CucaClient, UnifiedRequest, ...`` (the
  names a first program touches), from the install this interpreter has (``make test``
  makes an editable one, which adds setuptools' import finder to every ``import cuca``);
- ``import cuca`` from a regular install, the way a user gets it (``pip install .``
  into a temporary directory put first on ``PYTHONPATH``);
- the floor: ``import httpx, trio, attrs, cattrs``, cuca's own dependencies alone;
- the openai, anthropic and litellm SDKs (a row is skipped when it is not installed);
- a first turn: import, client, and one OpenAI-shaped turn against a replay server
  running in another process.

Every row reads compiled bytecode, as a user's interpreter does: pip compiles what it
installs, and Python caches what it compiles the first time a module of an editable
install is imported. So the child processes run without ``PYTHONDONTWRITEBYTECODE``
(which would make every ``import cuca`` of an editable install compile cuca's sources
again, while the dependencies' bytecode was compiled by pip), and a first warm-up round
writes cuca's bytecode cache.

Reported: each median, its ratio to the floor, and cuca's target (within 1.15x of the
floor). Never part of pass/fail.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


Row = tuple[str, list[str], dict[str, str]]

ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
ENV["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
"""The children's environment: bytecode is cached, as on a user's machine; LiteLLM uses
its bundled price map (with no network its fetch from GitHub retries with sleeps, which
would be timed as import cost)."""

REGULAR = "import cuca (regular install)"
FLOOR = "import httpx, trio, attrs, cattrs"
OUTSIDE = tempfile.gettempdir()


def regular_install(target: str) -> dict[str, str]:
    """A regular (non-editable) install of this checkout in ``target``, compiled as pip
    does, and the environment that imports cuca from it."""
    root = Path(__file__).resolve().parents[2]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "--target", target, str(root)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return {**ENV, "PYTHONPATH": target}


def rows(target: str) -> list[Row]:
    regular = regular_install(target)
    out: list[Row] = [
        ("floor: import httpx, trio, attrs, cattrs", ["-c", FLOOR], ENV),
        ("import cuca", ["-c", "import cuca"], ENV),
        (
            "from cuca import CucaClient, UnifiedRequest, ...",
            ["-c", "from cuca import CucaClient, ProviderEndpoint, Text, UnifiedRequest"],
            ENV,
        ),
        (REGULAR, ["-c", f"import cuca; assert cuca.__file__.startswith({target!r})"], regular),
    ]
    for sdk in ("openai", "anthropic", "litellm"):
        if importlib.util.find_spec(sdk) is not None:
            out.append((f"import {sdk}", ["-c", f"import {sdk}"], ENV))
        else:
            print(f"({sdk} is not installed: its row is skipped)")
    return out


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Wall time of one child, started outside the checkout (from the repository root,
    ``python -c`` would import cuca's folders through the current directory)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *argv], check=True, stdout=subprocess.DEVNULL, env=env, cwd=OUTSIDE
    )
    return time.perf_counter() - start


def main(runs: int) -> None:
    argv = [sys.executable, __file__, "--serve"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as target:
            first = ("first turn (import + client + one turn)", ["-c", FIRST_TURN, url], ENV)
            table = [*rows(target), first]
            times: dict[str, list[float]] = {name: [] for name, _, _ in table}
            for _, statement, env in table:  # the OS file cache and cuca's bytecode cache
                timed(statement, env)
            for _ in range(runs):
                for name, statement, env in table:
                    times[name].append(timed(statement, env))
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
    print()
    for name in ("import cuca", REGULAR):
        ratio = medians[name] / floor
        verdict = "met" if ratio <= TARGET else "MISSED"
        print(f"{name} / floor: {ratio:.2f}x (target <= {TARGET}x: {verdict})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        trio.run(serve)
    else:
        main(int(sys.argv[2]) if sys.argv[1:2] == ["--runs"] else RUNS)
