"""The floors of the package hold: no import cycle anywhere, and the import-linter
contracts of pyproject.toml kept.

Both tools read a package from its folder, and the ``package-dir`` mapping keeps
``cuca.stages``, ``cuca.providers`` and ``cuca.engine`` in folders of their own beside
``cuca/``: read from the checkout, ``grimp.build_graph("cuca")`` sees none of the three.
So the graph is built from a regular install (``pip install --target``), where every
subpackage sits in its parent's folder, and the test checks that the graph holds every
module of the four source folders before it looks for cycles.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"cuca": "cuca", "stages": "cuca.stages", "providers": "cuca.providers"}
FOLDERS["engine"] = "cuca.engine"

GRAPH = """
import json, sys
import grimp

graph = grimp.build_graph("cuca", exclude_type_checking_imports=False)
edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
print(json.dumps(edges))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A regular install of the checkout (no dependencies), as the tools must read it."""
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    shutil.copytree(ROOT, build / "src", ignore=shutil.ignore_patterns(".*", "build", "tests"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(build / "src")],
        check=True, capture_output=True,
    )  # fmt: skip
    return target


def source_modules() -> set[str]:
    """Every module of the four source folders, named as installed."""
    names: set[str] = set()
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.add(".".join((package, *parts)))
    return names


def import_graph(site: Path) -> dict[str, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", GRAPH],
        cwd=site.parent, env={"PYTHONPATH": str(site)}, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    graph: dict[str, list[str]] = json.loads(result.stdout)
    return graph


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph.get(module, ()):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = [stack.pop()]
            while component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_layers_the_graph_holds_every_module(site: Path) -> None:
    graph = import_graph(site)
    assert source_modules() <= set(graph)
    assert {"cuca.stages.sse", "cuca.providers.base", "cuca.engine.model"} <= set(graph)


def test_layers_no_import_cycle_anywhere(site: Path) -> None:
    """Imports under ``TYPE_CHECKING`` and inside functions count too."""
    assert cycles(import_graph(site)) == []


def test_layers_cycles_finds_a_cycle() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


def lint_imports(site: Path) -> subprocess.CompletedProcess[str]:
    lint = Path(sys.executable).parent / "lint-imports"
    return subprocess.run(
        [str(lint), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=site.parent, env={"PYTHONPATH": str(site)}, capture_output=True, text=True,
    )  # fmt: skip


def test_layers_contracts_are_kept(site: Path) -> None:
    result = lint_imports(site)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_layers_a_data_type_importing_pricing_breaks_the_contract(
    site: Path, tmp_path: Path
) -> None:
    """The contract can fail: ``cuca.types`` importing ``cuca.cost`` (a floor above it)
    is reported by name."""
    broken = tmp_path / "site"
    shutil.copytree(site, broken)
    types = broken / "cuca" / "types.py"
    types.write_text(types.read_text() + "\nimport cuca.cost\n")
    result = lint_imports(broken)
    assert result.returncode != 0
    assert "cuca.types -> cuca.cost" in result.stdout


@pytest.mark.parametrize(
    ("feature", "wire"),
    [("limits/limiter.py", "cuca.providers.base"), ("routing/pool.py", "cuca.stages.pipeline")],
)
def test_layers_a_feature_importing_the_stages_or_a_wire_breaks_the_contract(
    site: Path, tmp_path: Path, feature: str, wire: str
) -> None:
    """Features meet a turn at its seams: a rate limiter reading a vendor's headers
    itself, or a pool naming the pipeline's types, is reported by name."""
    broken = tmp_path / "site"
    shutil.copytree(site, broken)
    module = broken / "cuca" / feature
    module.write_text(module.read_text() + f"\nimport {wire}\n")
    result = lint_imports(broken)
    assert result.returncode != 0
    source = "cuca." + feature.removesuffix(".py").replace("/", ".")
    assert f"{source} -> {wire}" in result.stdout


def test_layers_every_part_of_cuca_sits_on_a_floor(site: Path) -> None:
    """A new module or feature package cannot escape the contract: every child of
    ``cuca`` (but the ``python -m cuca`` entry point) is named in a layer."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers"]
    named = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    children = {".".join(m.split(".")[:2]) for m in import_graph(site) if m != "cuca"}
    assert children - named == {"cuca.__main__"}
