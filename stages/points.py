"""The one table of a turn's insertion points, and the item type at each hop.

Both pipelines are built from this table: the client maps each :class:`Point` of
:data:`HTTP_PIPELINE` or :data:`LOCAL_PIPELINE` to its stage, ``docs/pipeline.md``
shows it (a test checks that they agree), and a user stage is placed relative to a
point. A ``Point[In, Out]`` reads ``In`` items and writes ``Out`` items, so a stage
inserted ``after(TRANSPORT, stage)`` must read and write ``ResponseHead | bytes``: mypy
catches a stage put in the wrong place. At run time, an item of the wrong type reaching
a built-in stage ends the turn with a :class:`~cuca.errors.PluginError` naming the
stage that sent it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeAlias, TypeVar, get_args

import attrs

from cuca.errors import CucaError
from cuca.generation import GenerationEnd, GenerationStart
from cuca.turn import EndOfTurn, Item
from cuca.types import Block, UnifiedRequest

from .items import EncodedRequest, ResponseHead
from .sse import SseEvent

EngineRecord: TypeAlias = GenerationStart | str | GenerationEnd
"""What the ``engine`` point writes and ``output_parse`` reads (:mod:`cuca.generation`)."""

__all__ = [
    "CHUNK_HOOKS",
    "DECODE",
    "ENCODE",
    "ENGINE",
    "HTTP_PIPELINE",
    "HTTP_POINTS",
    "LOCAL_PIPELINE",
    "LOCAL_POINTS",
    "OUTPUT_PARSE",
    "POINTS",
    "REQUEST_HOOKS",
    "SSE_PARSE",
    "TRANSPORT",
    "Point",
]

In = TypeVar("In")
Out = TypeVar("Out")


@attrs.frozen
class Point(Generic[In, Out]):
    """A built-in stage of a turn: its name, what it reads and writes (for people and
    for the run-time check), and what it does."""

    name: str
    reads: str
    writes: str
    what: str
    accepts: tuple[type, ...] = attrs.field(repr=False)

    def accepted_types(self) -> tuple[type, ...]:
        """The types of the items this stage reads."""
        return self.accepts

    def __str__(self) -> str:
        return self.name


_ITEMS: tuple[type, ...] = (*get_args(Block), CucaError, EndOfTurn)
_RECORDS: tuple[type, ...] = (GenerationStart, str, GenerationEnd)
_BLOCKS = "blocks, non-fatal `CucaError`s, then an `EndOfTurn`"

REQUEST_HOOKS: Point[UnifiedRequest, UnifiedRequest] = Point(
    "request_hooks",
    "`UnifiedRequest`",
    "`UnifiedRequest`",
    "the request as the turn's *before* seam left it (every plugin's `on_request`, "
    "in registration order, ran before the pipeline started)",
    (UnifiedRequest,),
)
ENCODE: Point[UnifiedRequest, EncodedRequest] = Point(
    "encode",
    "`UnifiedRequest`",
    "`EncodedRequest` (the request and its HTTP request)",
    "the provider adapter builds the vendor body",
    (UnifiedRequest,),
)
TRANSPORT: Point[EncodedRequest, ResponseHead | bytes] = Point(
    "transport",
    "`EncodedRequest`",
    "a `ResponseHead`, then `bytes`, one batch per network read",
    "the only socket of the turn (httpx), with retries before the first item",
    (EncodedRequest,),
)
SSE_PARSE: Point[ResponseHead | bytes, ResponseHead | SseEvent] = Point(
    "sse_parse",
    "`ResponseHead`, `bytes`",
    "the `ResponseHead`, then `SseEvent`s",
    "the sans-IO event-stream parser (or the adapter's own framer)",
    (ResponseHead, bytes),
)
DECODE: Point[ResponseHead | SseEvent, Item | EndOfTurn] = Point(
    "decode",
    "`ResponseHead`, `SseEvent`",
    _BLOCKS,
    "the adapter's stateful decoder, built from the `ResponseHead`'s request",
    (ResponseHead, SseEvent),
)
CHUNK_HOOKS: Point[Item | EndOfTurn, Item | EndOfTurn] = Point(
    "chunk_hooks",
    _BLOCKS,
    _BLOCKS,
    "every plugin's `on_stream_chunk`, then `on_response_complete` at the `EndOfTurn`",
    _ITEMS,
)
ENGINE: Point[UnifiedRequest, EngineRecord] = Point(
    "engine",
    "`UnifiedRequest`",
    "a `GenerationStart` (the request as sent, the output format), one `str` per token, "
    "a `GenerationEnd`",
    "the turn runs on the model's engine thread, in one batch with its other turns; "
    "each wake-up carries every token since the last",
    (UnifiedRequest,),
)
OUTPUT_PARSE: Point[EngineRecord, Item | EndOfTurn] = Point(
    "output_parse",
    "`GenerationStart`, `str`, `GenerationEnd`",
    _BLOCKS,
    "the streaming output parser of the model's format (text, reasoning, tool calls)",
    _RECORDS,
)

HTTP_PIPELINE: tuple[Point[Any, Any], ...] = (
    REQUEST_HOOKS,
    ENCODE,
    TRANSPORT,
    SSE_PARSE,
    DECODE,
    CHUNK_HOOKS,
)
"""The built-in stages of a turn over HTTP, in order."""

LOCAL_PIPELINE: tuple[Point[Any, Any], ...] = (REQUEST_HOOKS, ENGINE, OUTPUT_PARSE, CHUNK_HOOKS)
"""The built-in stages of a turn on the in-process engine, in order."""

HTTP_POINTS = tuple(point.name for point in HTTP_PIPELINE)
"""The names of :data:`HTTP_PIPELINE`."""

LOCAL_POINTS = tuple(point.name for point in LOCAL_PIPELINE)
"""The names of :data:`LOCAL_PIPELINE`."""

POINTS: Mapping[str, Point[Any, Any]] = {p.name: p for p in (*HTTP_PIPELINE, *LOCAL_PIPELINE)}
"""Every built-in point by name."""
