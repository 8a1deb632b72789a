"""Recorded and reconstructed wire transcripts (``tests/transcripts/``), and a driver that
runs one through the SSE parser and a provider decoder the way the pipeline does."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import attrs

from cuca.errors import CucaError, HttpStatusError, http_status_error
from cuca.providers.base import Framer, Item, StreamDecoder
from cuca.stages.sse import SseParser
from cuca.types import TurnSummary

TRANSCRIPTS = Path(__file__).resolve().parent.parent / "transcripts"


def transcript(name: str) -> bytes:
    """The bytes of ``tests/transcripts/<name>.sse`` (``"openai/text"``)."""
    return (TRANSCRIPTS / f"{name}.sse").read_bytes()


@attrs.frozen
class Decoded:
    """What a turn produced: its items, the error that ended it (if any), its summary."""

    items: list[Item]
    error: Exception | None
    summary: TurnSummary


def decode_chunks(
    decoder: StreamDecoder,
    chunks: Iterable[bytes],
    framer: Framer | None = None,
    catch: type[Exception] = CucaError,
) -> Decoded:
    """Feed ``chunks`` through ``framer`` (a fresh ``SseParser`` by default) into
    ``decoder``, stopping at the end marker and closing at end of stream, as
    ``cuca.stages.http`` does. An error of type ``catch`` ends the run and is returned;
    the conformance suite catches every ``Exception`` to check its type."""
    framer = SseParser() if framer is None else framer
    items: list[Item] = []
    try:
        for chunk in chunks:
            for event in framer.feed(chunk):
                items += decoder.feed(event)
                if decoder.finished:
                    break
            if decoder.finished:
                break
        else:
            for event in framer.close():
                items += decoder.feed(event)
                if decoder.finished:
                    break
        items += decoder.close()
    except catch as exc:
        return Decoded(items, exc, decoder.summary())
    return Decoded(items, None, decoder.summary())


def error_frame(name: str) -> str:
    """The data of the last event of transcript ``name`` that holds an error."""
    events = SseParser().feed(transcript(name))
    return [e.data for e in events if '"error"' in e.data or e.event == "error"][-1]


def in_stream(name: str, status: int, message: str) -> HttpStatusError:
    """The error cuca raises for transcript ``name``'s in-stream error: the kind of
    ``status``, with the frame as its body (equality does not compare ``provider``)."""
    return http_status_error(status, error_frame(name), message, provider=name.split("/")[0])
