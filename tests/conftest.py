"""Shared fixtures. Tests import helpers from ``tests/support``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import support.budget  # noqa: F401  (loads the Hypothesis profile chosen by the environment)


@pytest.fixture(autouse=True)
def _no_vendor_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vendors' key and base URL variables unset (a client reads them when no key is
    given): a developer's own OPENAI_API_KEY never reaches a test's servers."""
    from cuca.providers.table import ENDPOINTS

    for info in ENDPOINTS:
        for name in (*info.key_env, *info.base_url_env):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True, scope="session")
def _one_engine_thread() -> Iterator[None]:
    """Threads pinned: a model loaded in the tests runs one thread for every step unless
    the test passes its own counts (the test machines' cores are shared, where one
    thread is faster: docs/local-engine.md, Threads; thread counts never change bits)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("cuca.engine.model.default_threads", lambda: (1, 1))
        yield
