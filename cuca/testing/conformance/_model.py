"""The kit's data: the adapter under test, its good transcripts, and what went wrong."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import httpx

from cuca.client import CucaClient
from cuca.plugins import CucaPlugin
from cuca.retry import RetryPolicy
from cuca.stream import merge_blocks
from cuca.types import Block, ProviderEndpoint, Text, Thinking, ToolCall, UnifiedRequest

from .._reply import Reply

ANY_ID = "*"
"""A `ToolCall` id in a transcript's expected blocks that matches any id (for adapters that
make ids up, such as ``call_`` plus random hex digits)."""


def _blocks(value: Sequence[Block]) -> tuple[Block, ...]:
    return merge_blocks(tuple(value))


@attrs.frozen
class Transcript:
    """The bytes of one good turn, as the server sends its response body, and the blocks
    they must decode to (adjacent text and thinking deltas merged, see `merge_blocks`)."""

    name: str
    body: bytes = attrs.field(repr=False)
    blocks: tuple[Block, ...] = attrs.field(converter=_blocks)


def _default_request() -> UnifiedRequest:
    return UnifiedRequest.new("conformance-model").add_user_message("hi").set_max_tokens(64)


@attrs.frozen
class Subject:
    """The adapter under test and how a client reaches it on the replay server.

    `path` is appended to the server's URL to make the client's ``base_url`` (``"/v1"``
    for an OpenAI-style adapter that expects it). `end_marker` says whether the wire
    format marks the end of a turn (``[DONE]``, ``message_stop``): when it does, a body
    that ends before it must give a typed error; when it does not, a body cut at a frame
    boundary is a shorter good turn. `error_body` makes the vendor's JSON error body for
    a status and a message, if the wire has one. `fused` is the client's (see
    docs/pipeline.md): the kit's checks hold in both modes.
    """

    endpoint: ProviderEndpoint
    path: str = ""
    api_key: str | None = attrs.field(default=None, repr=False)
    provider_config: Any = None
    request: UnifiedRequest = attrs.field(factory=_default_request)
    end_marker: bool = True
    error_body: Callable[[int, str], bytes] | None = None
    fused: bool = True
    plugins: Sequence[CucaPlugin] = attrs.field(default=(), converter=tuple)
    """Given to the client: gates, a cache, observers (their seams hold in both modes)."""

    def client(self, server_url: str, http: httpx.AsyncClient) -> CucaClient:
        """A client for the adapter on `http`, pointed at a replay server; it never retries."""
        return CucaClient(
            self.endpoint,
            base_url=server_url + self.path,
            api_key=self.api_key,
            provider_config=self.provider_config,
            http_client=http,
            retry=RetryPolicy.never(),
            fused=self.fused,
            plugins=self.plugins,
        )


@attrs.frozen
class Failure:
    """One failed check: which, on which transcript, what broke it, and how to see it again.

    `case` names the chunking, offset, status or drop point that broke the check (the
    smallest one found: Hypothesis shrinks the ones it draws); `reproduce` is code that
    replays it, with `reply` the `Reply` it serves (``run_turn(subject, failure.reply)``).
    """

    check: str
    transcript: str
    case: str
    problem: str
    reproduce: str
    reply: Reply | None = attrs.field(default=None, repr=False, eq=False)

    def __str__(self) -> str:
        return (
            f"[{self.check}] transcript {self.transcript!r}, {self.case}: {self.problem}\n"
            f"    reproduce: {self.reproduce}"
        )


class ConformanceError(AssertionError):
    """Raised by `check_adapter` with every failure it found (`failures`), not just the first."""

    def __init__(self, subject: Subject, failures: Sequence[Failure]) -> None:
        self.subject = subject
        self.failures = tuple(failures)
        checks = sorted({failure.check for failure in self.failures})
        lines = [
            f"{len(self.failures)} conformance failure(s) for {subject.endpoint} "
            f"in {', '.join(checks)}:",
            *(str(failure) for failure in self.failures),
        ]
        super().__init__("\n".join(lines))


def same_blocks(actual: Sequence[Block], expected: Sequence[Block]) -> bool:
    """True when `actual` merges to `expected` (a `ToolCall` id of `ANY_ID` matches any id)."""
    merged = merge_blocks(tuple(actual))
    if len(merged) != len(expected):
        return False
    return all(_same(got, want) for got, want in zip(merged, expected, strict=True))


def is_prefix(actual: Sequence[Block], expected: Sequence[Block]) -> bool:
    """True when `actual` is the start of `expected`: whole blocks, then possibly a part of
    the next text or thinking block (a delta cut short)."""
    merged = merge_blocks(tuple(actual))
    if len(merged) > len(expected):
        return False
    for index, (got, want) in enumerate(zip(merged, expected, strict=False)):
        if _same(got, want):
            continue
        last = index == len(merged) - 1
        return last and _cut_short(got, want)
    return True


def _cut_short(got: Block, want: Block) -> bool:
    """True when `got` is the start of the text or thinking block `want` (unsigned yet)."""
    if isinstance(got, Text) and isinstance(want, Text):
        return got.signature is None and want.text.startswith(got.text)
    if isinstance(got, Thinking) and isinstance(want, Thinking):
        return got.signature is None and want.text.startswith(got.text)
    return False


def _same(got: Block, want: Block) -> bool:
    if isinstance(want, ToolCall) and isinstance(got, ToolCall) and want.id == ANY_ID:
        return attrs.evolve(got, id=ANY_ID) == want
    return got == want
