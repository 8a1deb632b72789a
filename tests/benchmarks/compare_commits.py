"""Run one benchmark against cuca as it was at earlier commits, alternated, in one run.

``python tests/benchmarks/compare_commits.py --commits 413a3ed HEAD --rounds 5 --
bench_openai_stream.py --paced-only --rounds 1`` installs each commit's cuca into a
virtualenv of its own under ``.cache/commits/`` (built once, from ``git worktree``; the
dependencies are resolved as they are today, so only cuca's code differs), then runs the
benchmark script of the working tree once per commit per round, the commits in turn, each
round starting with the next commit (so a busy machine slows every side alike). Every
line of the benchmark's output that ends a label with a ratio (``label  0.98x ...``) is
collected; the report gives, per label and commit, the median and the range over the
rounds.

Why: a target phrased as "back where it stood before X landed" is a comparison of two
commits on one machine, not of two figures taken on different days at different loads.
The benchmark script is today's for every side, so it must only use API the old
commits have. Never part of pass/fail.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "commits"
RATIO = re.compile(r"^(?P<label>\S.*?\S)\s+(?P<ratio>\d+(?:\.\d+)?)x\b")


def resolve(commit: str) -> str:
    """The full hash of ``commit``."""
    out = subprocess.run(
        ["git", "rev-parse", commit], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def python_for(commit: str, extra: str) -> Path:
    """The interpreter of a virtualenv holding ``commit``'s cuca (built on first use)."""
    venv = CACHE / commit[:12]
    python = venv / "bin" / "python"
    if python.exists():
        return python
    source = CACHE / f"{commit[:12]}-src"
    if not source.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(source), commit], cwd=ROOT, check=True
        )
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, f"{source}{extra}"], check=True)
    return python


def run_once(python: Path, script: list[str]) -> dict[str, float]:
    """The ratios one run of the benchmark printed, by label."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    path = ROOT / "tests" / "benchmarks" / script[0]
    out = subprocess.run(
        [str(python), str(path), *script[1:]], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"{python}: {script[0]} failed:\n{out.stdout}\n{out.stderr}")
    ratios: dict[str, float] = {}
    for line in out.stdout.splitlines():
        match = RATIO.match(line)
        if match:
            ratios[match["label"]] = float(match["ratio"])
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", nargs="+", required=True, help="commits; HEAD allowed")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--extra", default="[bench]", help="the extras to install cuca with")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT.py [ARGS]")
    args = parser.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        parser.error("name the benchmark script after --")
    sides = [(name, resolve(name)) for name in args.commits]
    pythons = {name: python_for(commit, args.extra) for name, commit in sides}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for round_ in range(args.rounds):
        order = sides[round_ % len(sides) :] + sides[: round_ % len(sides)]
        for name, _ in order:
            runs[name].append(run_once(pythons[name], script))
            print(f"round {round_ + 1}, {name}: {runs[name][-1]}", flush=True)
    with open("/proc/loadavg") as loadavg:
        load = loadavg.read().split()[0]
    print(f"\n{' '.join(script)}: medians (range) of {args.rounds} alternated rounds, load {load}")
    labels = list(dict.fromkeys(label for name, _ in sides for r in runs[name] for label in r))
    print(f"{'ratio':34}" + "".join(f"{name[:20]:>22}" for name, _ in sides))
    for label in labels:
        cells = []
        for name, _ in sides:
            values = [r[label] for r in runs[name] if label in r]
            if not values:
                cells.append(f"{'-':>22}")
                continue
            median = statistics.median(values)
            cells.append(f"{median:>8.2f}x ({min(values):.2f}-{max(values):.2f})")
        print(f"{label[:34]:34}" + "".join(f"{cell:>22}" for cell in cells))


if __name__ == "__main__":
    main()
