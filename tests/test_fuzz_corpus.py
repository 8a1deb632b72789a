"""Every input the nightly fuzzer ever found (``tests/fuzz_corpus/``) stays fixed."""

from __future__ import annotations

from pathlib import Path

import pytest
from conformance.targets import BY_NAME, decode

from cuca import CucaError

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
CASES = sorted(CORPUS.glob("*/*.bin"))


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.name}" for p in CASES])
def test_fuzz_corpus_case_ends_cleanly_or_in_a_cuca_error(path: Path) -> None:
    target = BY_NAME[path.parent.name]
    data = path.read_bytes()
    items, error = decode(target, [data])
    assert error is None or isinstance(error, CucaError), repr(error)
    halves = decode(target, [data[: len(data) // 2], data[len(data) // 2 :]])
    assert (halves[0], type(halves[1])) == (items, type(error))


def test_fuzz_corpus_seed_case_is_kept() -> None:
    """The corpus directory exists and holds at least the seed case, so the parametrized
    test above never silently collects nothing."""
    assert CASES, "tests/fuzz_corpus/ is empty"
