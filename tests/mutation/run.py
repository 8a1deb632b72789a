"""Mutation testing, module by module: ``make mutate [MODULES="cuca/limits/budget.py ..."]``.

For each module named (default: every module of ``modules.toml``), mutmut makes its
mutants and runs, for each, the tests of the module's test files (``modules.toml``) that
call the mutated function; the score printed is the share of mutants those tests kill,
survivors shown equivalent in ``equivalent.toml`` set apart. See docs/testing.md,
"Mutation testing".

Why a staging tree: the package maps ``cuca.stages``, ``cuca.providers`` and
``cuca.engine`` to the folders ``stages/``, ``providers/`` and ``engine/`` beside
``cuca/`` (``package-dir`` in pyproject.toml). mutmut copies the code it mutates to
``mutants/`` and puts that folder first on ``sys.path``; with the folders as they are,
``cuca.stages.opening`` would still be imported from ``stages/`` unmutated (and mutmut
would name its functions ``stages.opening``, matching no test). So each module runs in
``.cache/mutate/<module>/``, a copy laid out as the imports see it (``cuca/stages/``,
``cuca/providers/``, ``cuca/engine/``), where the mutants are the code the tests import.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# where a folder of the repository sits in the package (pyproject.toml, package-dir)
MAPPED = {"stages": "cuca/stages", "providers": "cuca/providers", "engine": "cuca/engine"}
# mutmut's exit codes (mutmut.stats.status_by_exit_code): a test failed, or the tests ran
# past their time (a mutant that hangs the turn is caught); anything else is not a kill
KILLED = {1, 3, 37}
TIMEOUT = {36, -24, 24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


def modules() -> dict[str, list[str]]:
    """Every module of ``modules.toml`` (tier and core) with its test files."""
    table = tomllib.loads((HERE / "modules.toml").read_text())
    return {module: tests for group in table.values() for module, tests in group.items()}


@attrs.frozen
class Equivalent:
    """A mutant shown to change no behaviour: which function, the line it changes, why."""

    module: str
    function: str
    was: str
    now: str
    reason: str


def equivalents() -> list[Equivalent]:
    """``equivalent.toml``: a mutant is known by its function and its one-line change,
    not by mutmut's number, which shifts when the function changes."""
    table = tomllib.loads((HERE / "equivalent.toml").read_text())
    return [Equivalent(**entry) for entry in table.get("mutant", [])]


def staged(module: str) -> str:
    """The module's path in the staging tree (``stages/opening.py``: ``cuca/stages/...``)."""
    top, _, rest = module.partition("/")
    return f"{MAPPED[top]}/{rest}" if top in MAPPED else module


def stage(module: str, tests: list[str]) -> Path:
    """A fresh staging tree for ``module``: the package as imported, the tests, and the
    project's pyproject.toml with this module's mutmut settings."""
    where = ROOT / ".cache" / "mutate" / module.replace("/", "_").removesuffix(".py")
    shutil.rmtree(where, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    shutil.copytree(ROOT / "cuca", where / "cuca", ignore=skip)
    for folder, target in MAPPED.items():
        shutil.copytree(ROOT / folder, where / target, ignore=skip)
    shutil.copytree(ROOT / "tests", where / "tests", ignore=skip)
    configure(where, module, tests)
    return where


def configure(where: Path, module: str, tests: list[str]) -> None:
    """The staging tree's pyproject.toml: the project's, with this module's mutmut
    settings (the test files as ``modules.toml`` lists them now)."""
    settings = {
        "source_paths": ["cuca"],
        "only_mutate": [staged(module)],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider"],
        "use_git_change_detection": False,
        # a mutant that makes a test wait for ever (a timeout never firing) is stopped at
        # 5 times the tests' measured time, not mutmut's 15: minutes, not a quarter hour
        "timeout_multiplier": 5.0,
        # debug keeps the workers' output: without it mutmut points each worker's stdout
        # at an open os.devnull, which tests/conftest.py reports as an unclosed file, and
        # every mutant is "killed" by that report (seen: 406 of 406 on budget.py)
        "debug": True,
    }
    lines = [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    text = (ROOT / "pyproject.toml").read_text() + "\n[tool.mutmut]\n" + "\n".join(lines) + "\n"
    (where / "pyproject.toml").write_text(text)


def functions(path: Path) -> dict[str, list[str]]:
    """The lines of every function of a mutated file (the original of each function is
    ``<name>__mutmut_orig``, each mutant ``<name>__mutmut_<n>``), by name."""
    source = path.read_text()
    lines = source.splitlines()
    found: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and "__mutmut_" in node.name:
            named = lines[node.lineno - 1 : node.end_lineno]  # the original and the
            found[node.name] = [line.replace(node.name, "f") for line in named]  # mutants
    return found


def diff(bodies: dict[str, list[str]], name: str) -> tuple[str, str]:
    """The lines a mutant removes and the ones it adds, each stripped and joined."""
    mangled = name.rsplit(".", 1)[-1]
    original = bodies.get(re.sub(r"__mutmut_\d+$", "__mutmut_orig", mangled), [])
    changed = list(difflib.ndiff(original, bodies.get(mangled, [])))
    was = [line[2:].strip() for line in changed if line.startswith("- ")]
    now = [line[2:].strip() for line in changed if line.startswith("+ ")]
    return " ".join(was), " ".join(now)


def function_of(name: str) -> str:
    """``cuca.limits.budget.xǁBudgetǁreserve__mutmut_7``: ``Budget.reserve``."""
    last = name.rsplit(".", 1)[-1].removeprefix("x_").removeprefix("x")
    return re.sub(r"__mutmut_\d+$", "", last).strip("ǁ").replace("ǁ", ".")


def refresh(where: Path, module: str, tests: list[str]) -> None:
    """The tests, and the package but the mutated module, as they are now, in the
    staging tree and its ``mutants/`` copy (the rest of the package may have moved
    since: the tests must import the code they were written for), and the module's
    test files as ``modules.toml`` lists them now (a new test file is run too: mutmut
    finds its tests new, and learns which functions they call)."""
    configure(where, module, tests)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for base in (where, where / "mutants"):
        shutil.copytree(ROOT / "tests", base / "tests", ignore=skip, dirs_exist_ok=True)
        keep = (base / staged(module)).read_bytes()
        shutil.copytree(ROOT / "cuca", base / "cuca", ignore=skip, dirs_exist_ok=True)
        for folder, target in MAPPED.items():
            shutil.copytree(ROOT / folder, base / target, ignore=skip, dirs_exist_ok=True)
        (base / staged(module)).write_bytes(keep)


def survivors(where: Path, module: str) -> list[str]:
    """The mutants of the last run of ``module`` in ``where`` that no test killed."""
    meta = where / "mutants" / (staged(module) + ".meta")
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    return [name for name, code in codes.items() if code not in KILLED | TIMEOUT]


def run(module: str, tests: list[str], children: int, mode: str) -> dict[str, object]:
    """Mutate ``module``, run its tests against each mutant, and score it. ``mode``:
    ``"all"``; ``"again"``, only the survivors of the last run, against the tests as
    they are now (tests are only ever added, so a mutant killed stays killed);
    ``"score"``, the last run's score, nothing run."""
    started = time.monotonic()
    where = ROOT / ".cache" / "mutate" / module.replace("/", "_").removesuffix(".py")
    names: list[str] = []
    before: dict[str, int | None] = {}
    again = mode == "again"
    if mode == "score":
        pass
    elif again and (where / "mutants").exists():
        if (where / staged(module)).read_text() != (ROOT / module).read_text():
            raise SystemExit(f"{module} changed since its last run: run it again whole")
        names = survivors(where, module)
        meta = where / "mutants" / (staged(module) + ".meta")
        before = json.loads(meta.read_text())["exit_code_by_key"]
        refresh(where, module, tests)
    else:
        where = stage(module, tests)
    log = where / "mutmut.log"
    if mode == "all" or names:
        with log.open("a" if again else "w") as out:
            mutmut = str(Path(sys.executable).parent / "mutmut")
            command = ["nice", "-n", "10", mutmut, "run", "--max-children", str(children)]
            done = subprocess.run([*command, *names], cwd=where, stdout=out, stderr=out)
        if done.returncode != 0:
            raise SystemExit(f"{module}: mutmut failed (exit {done.returncode}); see {log}")
    meta = where / "mutants" / (staged(module) + ".meta")
    table = json.loads(meta.read_text())
    codes: dict[str, int | None] = table["exit_code_by_key"]
    if names:
        # mutmut may make the module's mutants again (and forget their verdicts) when
        # the tests change: the mutants killed before are killed still (tests are only
        # added), the survivors have this run's verdict
        codes = {**before, **{name: codes.get(name) for name in names}}
        table["exit_code_by_key"] = codes
        meta.write_text(json.dumps(table))
    known = [e for e in equivalents() if e.module == module]
    bodies = functions(where / "mutants" / staged(module))
    alive, equivalent, odd = [], [], []
    for name, code in sorted(codes.items()):
        if code in KILLED or code in TIMEOUT:
            continue
        if code not in SURVIVED | NO_TESTS:
            odd.append((name, code))
            continue
        was, now = diff(bodies, name)
        function = function_of(name)
        match = [e for e in known if (e.function, e.was, e.now) == (function, was, now)]
        (equivalent if match else alive).append((name, function, was, now, code))
    with (where / "survivors.txt").open("w") as report:
        # each survivor as an entry of equivalent.toml would list it, reason left empty
        for name, function, was, now, code in alive:
            why = "no test calls it" if code in NO_TESTS else "survived"
            fields = {"module": module, "function": function, "was": was, "now": now}
            report.write(f"# {name} ({why})\n[[mutant]]\n")
            report.write("".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))
            report.write('reason = ""\n\n')
        for name, code in odd:
            report.write(f"{name}: exit code {code} (neither killed nor survived)\n\n")
    total = len(codes)
    killed = total - len(alive) - len(equivalent) - len(odd)
    return {
        "module": module,
        "mutants": total,
        "killed": killed,
        "equivalent": len(equivalent),
        "survived": len(alive) + len(odd),
        "score": killed / max(1, total - len(equivalent)),
        "seconds": round(time.monotonic() - started),
        "report": str((where / "survivors.txt").relative_to(ROOT)),
    }


def main() -> None:
    known = modules()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="paths as in modules.toml (default: all)")
    parser.add_argument("--children", type=int, default=1, help="mutants run at once")
    parser.add_argument(
        "--again", action="store_true",
        help="rerun only the last run's survivors, against the tests as they are now",
    )
    parser.add_argument("--score", action="store_true", help="the last run's score, nothing run")
    args = parser.parse_args()
    chosen = args.modules or list(known)
    unknown = [m for m in chosen if m not in known]
    if unknown:
        parser.error(f"not in tests/mutation/modules.toml: {', '.join(unknown)}")
    header = f"{'module':34} {'mutants':>7} {'killed':>6} {'equiv':>5} {'alive':>5} {'score':>6}"
    print(header, flush=True)
    for module in chosen:
        mode = "score" if args.score else "again" if args.again else "all"
        row = run(module, known[module], args.children, mode)
        print(
            f"{module:34} {row['mutants']:>7} {row['killed']:>6} {row['equivalent']:>5}"
            f" {row['survived']:>5} {row['score']:>6.1%}  {row['seconds']} s  {row['report']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
