"""A turn's blocks recorded as they came (cuca.recording): what a cache keeps of a live
turn gives back the very blocks it was fed, however the stream batched them."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuca.recording import Recording, Run
from cuca.types import Block, ProviderEndpoint, Text, Thinking, ToolCall

_texts = st.sampled_from(["", "Hel", "lo", " ü 日本"])
_maybe = st.none() | st.just("sig")
_blocks: st.SearchStrategy[Block] = st.one_of(
    st.builds(Text, _texts),  # plain, most of a stream
    st.builds(Text, _texts),
    st.builds(Thinking, _texts),
    st.builds(Text, _texts, _maybe, st.none() | st.just(ProviderEndpoint.GOOGLE_GEMINI)),
    st.builds(Thinking, _texts, _maybe, st.none(), st.booleans(), st.none() | st.just("rs_1")),
    st.builds(ToolCall, st.just("call_1"), st.just("lookup"), st.just({"q": "x"})),
)


def _batches(blocks: list[Block], cuts: list[int]) -> list[list[Block]]:
    edges = sorted({0, len(blocks), *(c % (len(blocks) + 1) for c in cuts)})
    return [blocks[a:b] for a, b in pairwise(edges)]


@given(st.lists(_blocks, max_size=30), st.lists(st.integers(min_value=0), max_size=6))
def test_recording_gives_back_the_blocks_under_any_batching(
    blocks: list[Block], cuts: list[int]
) -> None:
    """Fed in any batches, a recording is the blocks in order (iterated, counted,
    indexed, sliced), and its runs are those of the blocks fed at once: the entry a
    cache writes does not depend on how the stream was read."""
    recording = Recording()
    for batch in _batches(blocks, cuts):
        recording.extend(batch)
    assert list(recording) == blocks
    assert [type(b) for b in recording] == [type(b) for b in blocks]
    assert len(recording) == len(blocks)
    assert [recording[i] for i in range(-len(blocks), len(blocks))] == blocks + blocks
    assert recording[1:-1:2] == tuple(blocks[1:-1:2])
    assert recording.parts == Recording(blocks).parts


def test_recording_keeps_plain_deltas_as_runs_of_strings() -> None:
    """Plain deltas (no field set but the text) are held as strings, one run per
    stretch of one kind, across batches; a delta with any field set is held whole, in
    its place, and ends the run."""
    signed = Text("", signature="c2ln", provider=ProviderEndpoint.GOOGLE_GEMINI)
    recording = Recording([Thinking("Let"), Thinking(" me")])
    recording.extend([Thinking("."), Text("Hel")])
    recording.extend([Text("lo"), signed, Text("!"), Thinking("x", id="rs_1")])
    assert recording.parts == [
        Run(Thinking, ["Let", " me", "."]),
        Run(Text, ["Hel", "lo"]),
        signed,
        Run(Text, ["!"]),
        Thinking("x", id="rs_1"),
    ]


def test_recording_index_out_of_range_is_an_index_error() -> None:
    recording = Recording([Text("a"), Text("b")])
    with pytest.raises(IndexError):
        recording[2]
    with pytest.raises(IndexError):
        recording[-3]
