"""The wheel installs one import package, cuca, with its three subpackages."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    (found,) = out.glob("cuca-*.whl")
    return found


def test_packaging_wheel_holds_only_the_cuca_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"cuca", next(t for t in tops if t.endswith(".dist-info"))}
    for sub in ("stages", "providers", "engine", "testing"):
        assert f"cuca/{sub}/__init__.py" in names
    assert "cuca/py.typed" in names


def test_packaging_fresh_virtualenv_imports_subpackages(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # install the wheel itself with pip from this interpreter, targeting the new venv
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(wheel)],
        check=True,
    )
    # the dependencies (trio, httpx, ...) come from this environment, after the venv's own
    deps = sysconfig.get_paths()["purelib"]
    script = (
        f"import sys; sys.path.append({deps!r})\n"
        "import importlib.util, cuca, cuca.stages, cuca.providers, cuca.engine, cuca.testing\n"
        f"assert cuca.__file__.startswith({site!r}), cuca.__file__\n"
        "for top in ('stages', 'providers', 'engine'):\n"
        "    assert importlib.util.find_spec(top) is None, top\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [str(python), "-I", "-c", script], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.stdout.strip() == "ok", result.stderr
