"""The Hypothesis strategies and `feed_chunks` of `cuca.testing`."""

from __future__ import annotations

import pytest
from hypothesis import find, given
from hypothesis import strategies as st

from cuca.testing import chunk_sizes, chunkings, feed_chunks, split_points


@given(st.data(), st.binary(max_size=200), st.none() | st.integers(1, 10))
def test_testing_chunkings_concatenate_back(data: st.DataObject, payload: bytes,
                                            max_chunks: int | None) -> None:
    chunks = data.draw(chunkings(payload, max_chunks))
    assert b"".join(chunks) == payload
    assert all(chunks)
    if max_chunks is not None:
        assert len(chunks) <= max_chunks


@given(chunkings(b""))
def test_testing_chunkings_of_empty_data_is_no_chunk(chunks: list[bytes]) -> None:
    assert chunks == []


def test_testing_chunkings_reach_one_byte_chunks() -> None:
    payload = b"data: x\n\n"
    assert find(chunkings(payload), lambda chunks: len(chunks) == len(payload)) == [
        bytes([byte]) for byte in payload
    ]


def test_testing_chunkings_shrink_to_fewest_cuts() -> None:
    assert len(find(chunkings(b"abcdef"), lambda chunks: len(chunks) >= 2)) == 2


@given(st.data(), st.integers(0, 500), st.none() | st.integers(1, 10))
def test_testing_chunk_sizes_add_up(data: st.DataObject, total: int,
                                    max_chunks: int | None) -> None:
    sizes = data.draw(chunk_sizes(total, max_chunks))
    assert sum(sizes) == total
    assert all(size >= 1 for size in sizes)
    assert (total == 0) == (sizes == [])
    if max_chunks is not None:
        assert len(sizes) <= max_chunks


@given(st.data(), st.binary(max_size=100))
def test_testing_split_points_are_sorted_inside(data: st.DataObject, payload: bytes) -> None:
    points = data.draw(split_points(payload))
    assert points == sorted(set(points))
    assert all(0 < point < len(payload) for point in points)


def test_testing_strategies_refuse_bad_bounds() -> None:
    with pytest.raises(ValueError):
        chunkings(b"abc", max_chunks=0)
    with pytest.raises(ValueError):
        chunk_sizes(-1)


class LineParser:
    """A toy incremental parser: complete lines out, a partial line kept for later."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        return lines

    def close(self) -> list[bytes]:
        return [self.buffer] if self.buffer else []


class NoCloseParser:
    def feed(self, data: bytes) -> list[int]:
        return list(data)


def test_testing_feed_chunks_feeds_then_closes() -> None:
    assert feed_chunks(LineParser(), [b"a\nb", b"c\n", b"tail"]) == [b"a", b"bc", b"tail"]


def test_testing_feed_chunks_without_close() -> None:
    assert feed_chunks(NoCloseParser(), [b"\x01", b"\x02\x03"]) == [1, 2, 3]


@given(st.data())
def test_testing_feed_chunks_any_chunking_same_lines(data: st.DataObject) -> None:
    payload = b"one\ntwo\n\nthree"
    chunks = data.draw(chunkings(payload))
    assert feed_chunks(LineParser(), chunks) == feed_chunks(LineParser(), [payload])
