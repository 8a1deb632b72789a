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


def _unclosed_files() -> list[str]:
    """Files opened for writing by a path and still open, but those the engine closes at
    exit (llama-cpp-python's two /dev/null handles): what the interpreter would report
    as ``ResourceWarning: unclosed file`` after the suite, where ``filterwarnings =
    error`` cannot see it."""
    import gc
    import io
    import logging

    from cuca.engine import _llama_devnull_files

    gc.collect()
    # and the log file of pytest's logging plugin (os.devnull), which it closes later
    owned = [h.stream for h in gc.get_objects() if isinstance(h, logging.FileHandler)]
    closed_at_exit: set[int] = set()
    for file in [*_llama_devnull_files(), *owned]:
        buffer = getattr(file, "buffer", None)
        closed_at_exit |= {id(file), id(buffer), id(getattr(buffer, "raw", None))}
    found = []
    for obj in gc.get_objects():
        if not isinstance(obj, io.IOBase) or id(obj) in closed_at_exit:
            continue
        name, mode = getattr(obj, "name", None), str(getattr(obj, "mode", ""))
        if isinstance(name, str) and not name.startswith("<") and not obj.closed:
            if any(flag in mode for flag in "wa+"):
                found.append(f"{type(obj).__name__} {name!r} mode={mode!r}")
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the suite on a file left open (it would warn only at interpreter exit)."""
    left = _unclosed_files()
    if left:
        sys.stderr.write("\nfiles left open at the end of the suite:\n  " + "\n  ".join(left))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
