"""The public conformance kit (`cuca.testing.conformance`) has teeth.

A good adapter for a made-up wire format passes it; four adapters with one bug each (a
block lost on some chunkings, a cut stream that ends cleanly, a bare KeyError on a
malformed frame, a thread leaked when a turn is dropped) fail it, and the error names the
check, the transcript, the case that broke it and how to replay it.
"""

from __future__ import annotations

import pytest
from support.budget import examples
from support.tick_adapter import TICK, TRANSCRIPTS, error_body

from cuca import ConfigurationError, ProviderEndpoint, Text
from cuca.testing.conformance import (
    CHECKS,
    ConformanceError,
    Failure,
    Subject,
    Transcript,
    check_adapter,
    conformance_test,
    run_turn,
)

OPTIONS = {"error_body": error_body, "max_examples": examples(10)}

# the pytest form, as a user would write it: one test item per check
test_conformance_kit_tick_adapter_passes = conformance_test(TICK, TRANSCRIPTS, **OPTIONS)


def failures_of(name: str, checks: list[str]) -> list[Failure]:
    with pytest.raises(ConformanceError) as caught:
        check_adapter(ProviderEndpoint.custom(name), TRANSCRIPTS, checks=checks, **OPTIONS)
    assert caught.value.failures, "a ConformanceError always lists its failures"
    for failure in caught.value.failures:
        assert str(failure) in str(caught.value)  # the message shows every failure
    return list(caught.value.failures)


def test_conformance_kit_catches_a_block_lost_on_some_chunkings() -> None:
    (failure,) = failures_of("tick-read-by-read", list(CHECKS))
    assert (failure.check, failure.transcript) == ("chunking", "hello")
    assert "Text(text='Hello, world ', " in failure.problem  # the last block, "✓", is gone
    assert failure.reply is not None and failure.reply.chunks is not None
    sizes = failure.reply.chunks
    body = TRANSCRIPTS[0].body
    assert failure.case == f"writes of {list(sizes)}"
    assert sum(sizes) == len(body) and len(sizes) == 2  # shrunk to one cut...
    tick = "✓".encode()
    assert body[: sizes[0]].endswith((tick[:1], tick[:2]))  # ...inside the bytes of "✓"
    subject = Subject(ProviderEndpoint.custom("tick-read-by-read"))
    replayed = run_turn(subject, failure.reply)  # the reproduction reproduces
    assert replayed.blocks == [Text("Hel"), Text("lo, world ")]


def test_conformance_kit_catches_a_cut_stream_that_ends_cleanly() -> None:
    found = failures_of("tick-clean-end", ["truncation", "transcript"])
    assert {(f.check, f.transcript) for f in found} == {
        ("truncation", "hello"),
        ("truncation", "tool_call"),
    }
    assert all("ended cleanly" in f.problem for f in found)
    assert found[0].case == "body cut at byte 0"  # the smallest offset that breaks it


def test_conformance_kit_catches_a_bare_key_error() -> None:
    found = failures_of("tick-key-error", ["garbage", "wrong_types", "transcript"])
    assert {f.check for f in found} <= {"garbage", "wrong_types"}
    assert any(f.check == "garbage" and "KeyError" in f.problem for f in found)
    assert all("not a CucaError" in f.problem for f in found)


def test_conformance_kit_catches_a_thread_leaked_on_drop() -> None:
    (failure,) = failures_of("tick-leaky", ["drops", "transcript", "chunking"])
    assert failure.check == "drops"
    assert "thread 'tick-heartbeat' outlived the turn" in failure.problem
    assert failure.case.startswith("drop at message ")


def test_conformance_kit_reports_every_failure_at_once() -> None:
    """Failures of several transcripts and checks come together, in order, in one error."""
    found = failures_of("tick-clean-end", ["truncation", "cut_connection", "transcript"])
    assert len(found) == 2  # cut_connection holds: the transport reports the cut itself
    bad = Transcript("lies", TRANSCRIPTS[0].body, [Text("Goodbye")])
    with pytest.raises(ConformanceError) as caught:
        check_adapter(TICK, [bad, *TRANSCRIPTS], checks=["transcript", "chunking"], **OPTIONS)
    assert [(f.check, f.transcript) for f in caught.value.failures] == [
        ("transcript", "lies"),
        ("chunking", "lies"),
    ]


def test_conformance_kit_refuses_unknown_checks_and_no_transcripts() -> None:
    with pytest.raises(ConfigurationError, match="unknown checks \\['nope'\\]"):
        check_adapter(TICK, TRANSCRIPTS, checks=["nope"])
    with pytest.raises(ConfigurationError, match="at least one good transcript"):
        check_adapter(TICK, [])
