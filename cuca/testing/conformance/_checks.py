"""The checks of the kit. Each takes the adapter under test, its transcripts and a budget,
and returns every failure it found (an empty list: the check passed).

A check states what a user of the adapter would see; see ``docs/testing.md``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
from hypothesis import HealthCheck, Phase, Verbosity, example, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from cuca.errors import (
    CucaError,
    HttpStatusError,
    JsonError,
    ProviderError,
    ReadTimeout,
    SseParseError,
    StreamIncomplete,
    http_status_error,
)
from cuca.stream import merge_blocks

from .._reply import Reply
from .._strategies import chunk_sizes
from ._model import Failure, Subject, Transcript, is_prefix, same_blocks
from ._mutate import GARBAGE, wrongly_typed
from ._turn import Drop, Outcome, hops, run_turn

T = TypeVar("T")

STALL_TIMEOUT = 0.3
"""The read timeout of the stall check, in seconds."""

STATUSES = (400, 401, 403, 404, 413, 429, 500, 503)
"""The error statuses every adapter must turn into an `HttpStatusError`."""


@attrs.frozen
class Effort:
    """How hard the checks search: Hypothesis examples per search, and how many byte
    offsets the truncation checks try per transcript (None: every offset)."""

    max_examples: int = 10
    max_offsets: int | None = 48


Check = Callable[[Subject, Sequence[Transcript], Effort], list[Failure]]


def _reply_code(transcript: Transcript, **options: Any) -> str:
    shown = ", ".join(f"{name}={value!r}" for name, value in options.items())
    return f"run_turn(subject, Reply(<{transcript.name}>{', ' if shown else ''}{shown}))"


def _raw(outcome: Outcome) -> str | None:
    """A problem when the turn ended in something that is not a `CucaError`."""
    error = outcome.error
    if error is not None and not isinstance(error, CucaError):
        return f"ended in {type(error).__name__}: {error} (not a CucaError)"
    return None


def _leaked(outcome: Outcome) -> str | None:
    return "; ".join(outcome.leaks) or None


def check_transcript(
    subject: Subject, transcripts: Sequence[Transcript], _: Effort
) -> list[Failure]:
    """Each transcript, sent in one write, decodes to its blocks, cleanly."""
    failures = []
    for transcript in transcripts:
        reply = Reply(transcript.body)
        outcome = run_turn(subject, reply)
        problem = _raw(outcome) or _whole(outcome, transcript) or _leaked(outcome)
        if problem:
            code = _reply_code(transcript)
            failure = Failure("transcript", transcript.name, "one write", problem, code, reply)
            failures.append(failure)
    return failures


def _whole(outcome: Outcome, transcript: Transcript) -> str | None:
    """A problem when `outcome` is not the whole good turn of `transcript`."""
    if outcome.error is not None:
        return f"a good turn ended in {type(outcome.error).__name__}: {outcome.error}"
    if outcome.error_items:
        return f"a good turn yielded error items {outcome.error_items!r}"
    if not same_blocks(outcome.blocks, transcript.blocks):
        return (
            f"decoded {list(merge_blocks(outcome.blocks))!r}, expected {list(transcript.blocks)!r}"
        )
    if not outcome.completed:
        return "the stream ended without a response"
    return None


def check_chunking(
    subject: Subject, transcripts: Sequence[Transcript], budget: Effort
) -> list[Failure]:
    """Any cut of the body into network writes gives the same blocks."""
    failures = []
    for transcript in transcripts:

        def examine(sizes: list[int], transcript: Transcript = transcript) -> Failure | None:
            reply = Reply(transcript.body, chunks=sizes)
            outcome = run_turn(subject, reply)
            problem = _raw(outcome) or _whole(outcome, transcript) or _leaked(outcome)
            if problem is None:
                return None
            code = _reply_code(transcript, chunks=sizes)
            case = f"writes of {sizes}"
            return Failure("chunking", transcript.name, case, problem, code, reply)

        strategy = chunk_sizes(len(transcript.body), max_chunks=64)
        one_byte_writes = [[1] * len(transcript.body)]  # splits every character and line
        found = _search(strategy, examine, budget, first=one_byte_writes)
        failures += [_fewer_cuts(failure, examine) for failure in found]
    return failures


def _fewer_cuts(failure: Failure, examine: Callable[[list[int]], Failure | None]) -> Failure:
    """Remove the cuts of a failing chunking one at a time while it still fails, so that
    every cut left is needed (Hypothesis shrinks towards fewer cuts, but a chunking it
    drew as "one byte per write" can keep many)."""
    assert failure.reply is not None and failure.reply.chunks is not None
    sizes = failure.reply.chunks
    points = list(itertools.accumulate(sizes))[:-1]
    index = 0
    while index < len(points):
        fewer = points[:index] + points[index + 1 :]
        smaller = examine([b - a for a, b in itertools.pairwise([0, *fewer, sum(sizes)])])
        if smaller is not None:
            points, failure = fewer, smaller
        else:
            index += 1
    return failure


def offsets(body: bytes, limit: int | None) -> list[int]:
    """Where to cut `body`: every offset when `limit` is None, else up to `limit` of them,
    frame boundaries (and one byte either side) first, then evenly spread offsets."""
    if limit is None or limit >= len(body):
        return list(range(len(body)))
    ends = [i + 2 for i in range(len(body) - 1) if body[i : i + 2] == b"\n\n"]
    ends += [i + 1 for i in range(len(body)) if body[i : i + 1] == b"\n"]
    step = max(1, len(body) // max(1, limit))
    ordered = [0, *ends, *(e - 1 for e in ends), *(e + 1 for e in ends), *range(0, len(body), step)]
    chosen: dict[int, None] = {}
    for offset in ordered:
        if 0 <= offset < len(body):
            chosen.setdefault(offset)
        if len(chosen) >= limit:
            break
    return sorted(chosen)


TRUNCATION_ERRORS = (StreamIncomplete, JsonError, SseParseError, ProviderError)
"""What a body cut short may end in: `StreamIncomplete`, or the wire's own error about the
last, partial frame."""


def check_truncation(
    subject: Subject, transcripts: Sequence[Transcript], budget: Effort
) -> list[Failure]:
    """A complete HTTP response whose body stops early: a prefix of the blocks, then a
    `StreamIncomplete` (or the wire's own error about the partial frame); a clean end only
    when nothing was lost (or at a frame boundary of a wire without an end marker)."""
    failures = []
    for transcript in transcripts:
        for cut in offsets(transcript.body, budget.max_offsets):
            reply = Reply(transcript.body[:cut])
            outcome = run_turn(subject, reply)
            problem = _raw(outcome) or _prefix(outcome, transcript) or _leaked(outcome)
            if problem is None and outcome.error is None and subject.end_marker:
                if not same_blocks(outcome.blocks, transcript.blocks):
                    problem = "a body cut before the end marker ended cleanly (blocks lost)"
            if problem is None and outcome.error is not None:
                if not isinstance(outcome.error, TRUNCATION_ERRORS):
                    problem = f"a body cut short gave {outcome.describe()}, not StreamIncomplete"
            if problem:
                code = f"run_turn(subject, Reply(<{transcript.name}>[:{cut}]))"
                case = f"body cut at byte {cut}"
                failures.append(Failure("truncation", transcript.name, case, problem, code, reply))
                break  # the smallest failing offset is the reproduction
    return failures


def _prefix(outcome: Outcome, transcript: Transcript) -> str | None:
    if not is_prefix(outcome.blocks, transcript.blocks):
        blocks = list(merge_blocks(outcome.blocks))
        return f"decoded {blocks!r}, not a prefix of {list(transcript.blocks)!r}"
    return None


def check_cut_connection(
    subject: Subject, transcripts: Sequence[Transcript], budget: Effort
) -> list[Failure]:
    """The connection closes mid-response: a prefix of the blocks, then `StreamIncomplete`
    (a clean end only if every block had arrived)."""
    failures = []
    for transcript in transcripts:
        for cut in offsets(transcript.body, budget.max_offsets):
            reply = Reply(transcript.body, cut_after=cut)
            outcome = run_turn(subject, reply)
            problem = _raw(outcome) or _prefix(outcome, transcript) or _leaked(outcome)
            if problem is None and not isinstance(outcome.error, StreamIncomplete):
                if outcome.error is not None or not same_blocks(outcome.blocks, transcript.blocks):
                    problem = f"a cut connection gave {outcome.describe()}, not StreamIncomplete"
            if problem:
                code = _reply_code(transcript, cut_after=cut)
                case = f"connection closed after byte {cut}"
                failure = Failure("cut_connection", transcript.name, case, problem, code, reply)
                failures.append(failure)
                break
    return failures


def check_stall(subject: Subject, transcripts: Sequence[Transcript], _: Effort) -> list[Failure]:
    """The server stops sending halfway: with a read timeout, a `ReadTimeout` after a
    prefix of the blocks."""
    transcript = transcripts[0]
    half = len(transcript.body) // 2
    reply = Reply(transcript.body, stall_after=half)
    outcome = run_turn(subject, reply, read_timeout=STALL_TIMEOUT)
    problem = _raw(outcome) or _prefix(outcome, transcript) or _leaked(outcome)
    if problem is None and not isinstance(outcome.error, ReadTimeout):
        problem = f"a stall gave {outcome.describe()}, not a ReadTimeout"
    if problem is None:
        return []
    code = _reply_code(transcript, stall_after=half) + f" with read_timeout={STALL_TIMEOUT}"
    case = f"stall after byte {half}"
    return [Failure("stall", transcript.name, case, problem, code, reply)]


def check_http_status(
    subject: Subject, transcripts: Sequence[Transcript], _: Effort
) -> list[Failure]:
    """Each error status, with the vendor's JSON body and with an HTML page: the
    `HttpStatusError` of its kind (`AuthenticationError` for 401 and 403, `RateLimitError`
    for 429, `ServerError` for 5xx) with that status and the vendor's message."""
    failures = []
    for status in STATUSES:
        for kind in ("json", "html"):
            message = f"conformance says no ({status})"
            if kind == "json" and subject.error_body is None:
                continue
            if kind == "json":
                assert subject.error_body is not None
                body, ctype = subject.error_body(status, message), "application/json"
            else:
                body, ctype = f"<html>{message}</html>".encode(), "text/html"
            reply = Reply(body, status=status, headers=[("content-type", ctype)])
            outcome = run_turn(subject, reply)
            problem = _raw(outcome) or _leaked(outcome) or _status(outcome, status, message)
            if problem:
                code = f"run_turn(subject, {reply!r})"
                case = f"status {status}, {kind} body"
                failures.append(Failure("http_status", "-", case, problem, code, reply))
    return failures


def _status(outcome: Outcome, status: int, message: str) -> str | None:
    error = outcome.error
    kind = type(http_status_error(status, ""))
    if type(error) is not kind or not isinstance(error, HttpStatusError) or error.status != status:
        return f"status {status} gave {outcome.describe()}, not a {kind.__name__}({status})"
    if message not in str(error):
        return f"the vendor's message is not in the error: {error}"
    if outcome.blocks:
        return f"an error status yielded blocks {outcome.blocks!r}"
    return None


def check_garbage(subject: Subject, transcripts: Sequence[Transcript], _: Effort) -> list[Failure]:
    """Bodies that are no good turn: a typed error (or, on a wire without an end marker,
    a clean end), never another exception."""
    failures = []
    for kind, body in GARBAGE.items():
        reply = Reply(body)
        outcome = run_turn(subject, reply)
        problem = _raw(outcome) or _leaked(outcome)
        if problem is None and outcome.error is None and subject.end_marker:
            problem = f"garbage ended cleanly ({outcome.describe()}): no end marker was sent"
        if problem:
            code = f"run_turn(subject, Reply({body[:40]!r}...))"
            failures.append(Failure("garbage", "-", kind, problem, code, reply))
    return failures


def check_wrong_types(
    subject: Subject, transcripts: Sequence[Transcript], budget: Effort
) -> list[Failure]:
    """A transcript with one JSON value of another type: blocks and `CucaError`s only."""
    failures = []
    for transcript in transcripts:

        def examine(case: tuple[str, bytes], transcript: Transcript = transcript) -> Failure | None:
            where, body = case
            reply = Reply(body)
            outcome = run_turn(subject, reply)
            problem = _raw(outcome) or _leaked(outcome)
            if problem is None:
                return None
            code = f"run_turn(subject, Reply(<{transcript.name} with {where}>))"
            return Failure("wrong_types", transcript.name, where, problem, code, reply)

        failures += _search(wrongly_typed(transcript.body), examine, budget)
    return failures


def check_drops(
    subject: Subject, transcripts: Sequence[Transcript], budget: Effort
) -> list[Failure]:
    """The turn dropped at any hop after any number of messages: no task, thread, file
    descriptor or connection is left, and nothing but a `CucaError` escapes."""
    names = {transcript.name: transcript for transcript in transcripts}
    strategy = st.tuples(
        st.sampled_from(sorted(names)),
        st.sampled_from(hops()),
        st.integers(0, 6),
        st.integers(1, 64),
    )

    def examine(case: tuple[str, str, int, int]) -> Failure | None:
        name, hop, index, size = case
        transcript = names[name]
        sizes = [size] * (len(transcript.body) // size)
        drop = Drop(hop, index)
        reply = Reply(transcript.body, chunks=sizes)
        outcome = run_turn(subject, reply, drop=drop)
        problem = _raw(outcome) or _leaked(outcome)
        if problem is None:
            return None
        code = f"run_turn(subject, Reply(<{name}>, chunks=[{size}] * {len(sizes)}), drop={drop!r})"
        where = f"{drop}, writes of {size} bytes"
        return Failure("drops", name, where, problem, code, reply)

    return _search(strategy, examine, budget)


class _Found(Exception):
    """Raised inside a Hypothesis search to mark an example as failing."""


def _search(
    strategy: st.SearchStrategy[T],
    examine: Callable[[T], Failure | None],
    budget: Effort,
    first: Sequence[T] = (),
) -> list[Failure]:
    """Search `strategy` for a failing example, trying the cases in `first` before any
    other; return the smallest one found (Hypothesis shrinks it), or nothing.
    Deterministic: the same adapter gives the same examples."""
    found: list[Failure] = []

    @settings(
        max_examples=budget.max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
    )
    @given(strategy)
    def probe(case: T) -> None:
        failure = examine(case)
        if failure is not None:
            found.append(failure)
            raise _Found

    for case in first:
        probe = example(case)(probe)
    try:
        probe()
    except _Found:
        return found[-1:]  # the last failure is the shrunk one
    except Flaky:
        # the same case failed once and passed again (a network read split the body
        # where the chunking did not): report the smallest failure seen
        return [min(found, key=lambda failure: len(failure.case))] if found else []
    return []


CHECKS: dict[str, Check] = {
    "transcript": check_transcript,
    "chunking": check_chunking,
    "truncation": check_truncation,
    "cut_connection": check_cut_connection,
    "stall": check_stall,
    "http_status": check_http_status,
    "garbage": check_garbage,
    "wrong_types": check_wrong_types,
    "drops": check_drops,
}
"""Every check, by name, in the order `check_adapter` runs them."""
