"""Hypothesis strategies for the ways a byte stream can be cut into network reads.

This module needs Hypothesis (the ``testing`` extra); ``cuca.testing`` imports it only when
one of these names is first used.

Examples shrink towards fewer cuts, so a failure is reported with the simplest chunking that
still breaks the code under test.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from hypothesis import strategies as st


def split_points(data: bytes, max_points: int | None = None) -> st.SearchStrategy[list[int]]:
    """Sorted, distinct offsets strictly inside `data` where it can be cut.

    Cutting at every point gives non-empty chunks. Besides arbitrary points, the strategy
    draws regular cuts every k bytes and cuts before every byte of a prefix (the whole of
    `data` included: one byte per chunk).
    """
    return _points(len(data), max_points)


def chunkings(data: bytes, max_chunks: int | None = None) -> st.SearchStrategy[list[bytes]]:
    """Lists of non-empty chunks whose concatenation is `data` (``[]`` for empty data).

    Covers one chunk, one byte per chunk, regular sizes and arbitrary cuts; see
    `split_points` for the cuts.
    """
    return _points(len(data), _max_points(max_chunks)).map(lambda points: _split(data, points))


def chunk_sizes(total: int, max_chunks: int | None = None) -> st.SearchStrategy[list[int]]:
    """Lists of positive sizes adding up to `total` (``[]`` for 0), e.g. for `Reply.chunks`."""
    if total < 0:
        raise ValueError(f"total must not be negative, got {total}")
    return _points(total, _max_points(max_chunks)).map(lambda points: _sizes(total, points))


def _max_points(max_chunks: int | None) -> int | None:
    """N chunks take N - 1 cuts."""
    if max_chunks is None:
        return None
    if max_chunks < 1:
        raise ValueError(f"max_chunks must be at least 1, got {max_chunks}")
    return max_chunks - 1


def _points(length: int, max_points: int | None) -> st.SearchStrategy[list[int]]:
    """Cut points for `length` bytes, or no cut when there is nothing to cut."""
    if length <= 1 or max_points == 0:
        return st.just([])
    return _cut_points(length, length - 1 if max_points is None else min(max_points, length - 1))


@st.composite
def _cut_points(draw: st.DrawFn, length: int, limit: int) -> list[int]:
    """At most `limit` cuts, drawn in one of three styles.

    "arbitrary" cuts anywhere; "regular" cuts every `step` bytes; "dense" cuts before every
    byte of a prefix whose size is drawn on a log scale, so that one byte per chunk (the
    whole data as prefix) comes up often. Each style shrinks towards fewer cuts.
    """
    style = draw(st.sampled_from(("arbitrary", "regular", "dense")))
    if style == "arbitrary":
        return sorted(draw(st.lists(st.integers(1, length - 1), unique=True, max_size=limit)))
    if style == "regular":
        finest = -(-length // (limit + 1))  # ceil: a step that needs at most `limit` cuts
        return _every(length - draw(st.integers(0, length - finest)), length)
    prefix = 2 ** draw(st.integers(0, length.bit_length()))
    return list(range(1, min(prefix, length, limit + 1)))


def _every(step: int, length: int) -> list[int]:
    """A cut every `step` bytes."""
    return list(range(step, length, step))


def _split(data: bytes, points: Sequence[int]) -> list[bytes]:
    """Cut `data` at `points`; no chunk at all for empty data."""
    if not data:
        return []
    return [data[start:end] for start, end in pairwise([0, *points, len(data)])]


def _sizes(total: int, points: Sequence[int]) -> list[int]:
    """The lengths of the chunks that cutting `total` bytes at `points` gives."""
    if not total:
        return []
    return [end - start for start, end in pairwise([0, *points, total])]
