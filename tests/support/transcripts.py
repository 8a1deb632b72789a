"""Recorded and reconstructed wire transcripts (``tests/transcripts/``), and a driver that
runs one through the SSE parser and a provider decoder the way the pipeline does."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import attrs

from cuca.errors import CucaError
from cuca.providers.base import Item, StreamDecoder
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
    error: CucaError | None
    summary: TurnSummary


def decode_chunks(decoder: StreamDecoder, chunks: Iterable[bytes]) -> Decoded:
    """Feed ``chunks`` through a fresh ``SseParser`` into ``decoder``, stopping at the
    end marker and closing at end of stream, as ``cuca.stages.http`` does."""
    parser = SseParser()
    items: list[Item] = []
    try:
        for chunk in chunks:
            for event in parser.feed(chunk):
                items += decoder.feed(event)
                if decoder.finished:
                    break
            if decoder.finished:
                break
        else:
            for event in parser.close():
                items += decoder.feed(event)
        items += decoder.close()
    except CucaError as exc:
        return Decoded(items, exc, decoder.summary())
    return Decoded(items, None, decoder.summary())
