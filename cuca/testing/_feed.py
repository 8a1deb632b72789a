"""`feed_chunks`: drive an incremental parser with a list of chunks, as a socket would."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Feedable(Protocol[T_co]):
    """Anything with ``feed(bytes) -> iterable of results``, like an incremental parser."""

    def feed(self, data: bytes, /) -> Iterable[T_co]:
        """Consume `data` and return what it completed."""
        ...


def feed_chunks(parser: Feedable[T_co], chunks: Iterable[bytes]) -> list[T_co]:
    """Feed `chunks` to `parser` one by one, then close it; return all results in order.

    ``parser.close()`` is called at the end when the parser has one (a parser that holds a
    partial frame flushes it there); a `None` result from it counts as no results.
    """
    results: list[T_co] = []
    for chunk in chunks:
        results.extend(parser.feed(chunk))
    close = getattr(parser, "close", None)
    if callable(close):
        results.extend(close() or ())
    return results
