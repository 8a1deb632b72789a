"""Stop sequences on the local engine, matched on the text as it is generated
(:class:`cuca.engine.stops.StopMatcher`): nothing of a stop sequence is ever shown,
whichever tokens it is split across."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from cuca.engine.stops import StopMatcher


def run(stops: tuple[str, ...], pieces: list[str]) -> tuple[str, bool, int]:
    """What is shown, whether a stop sequence ended it, and after how many pieces."""
    matcher, shown = StopMatcher(stops), []
    for count, piece in enumerate(pieces, 1):
        text, stopped = matcher.feed(piece)
        shown.append(text)
        if stopped:
            return "".join(shown), True, count
    return "".join(shown) + matcher.flush(), False, len(pieces)


def test_stops_a_sequence_split_across_tokens_ends_the_answer_before_it() -> None:
    assert run(("\n\n",), ["Paris", ".\n", "\nNext", " line"]) == ("Paris.", True, 3)


def test_stops_text_that_only_began_a_sequence_is_shown_once_ruled_out() -> None:
    matcher = StopMatcher(("END",))
    assert matcher.feed("the EN") == ("the ", False)
    assert matcher.feed("D") == ("", True)
    matcher = StopMatcher(("END",))
    assert matcher.feed("the EN") == ("the ", False)
    assert matcher.feed("ergy") == ("ENergy", False)


def test_stops_held_text_is_flushed_when_the_answer_ends_otherwise() -> None:
    assert run(("END",), ["the E"]) == ("the E", False, 1)


def test_stops_the_earliest_of_several_sequences_wins() -> None:
    assert run(("world", "lo"), ["hello world"]) == ("hel", True, 1)


@given(
    text=st.text(alphabet="abEND\n", max_size=40),
    stops=st.lists(st.text(alphabet="abEND\n", min_size=1, max_size=4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=10),
)
def test_stops_any_chunking_shows_the_text_up_to_the_first_sequence(
    text: str, stops: list[str], cuts: list[int]
) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    found = [i for s in stops if (i := text.find(s)) >= 0]
    expected = text[: min(found)] if found else text
    shown, stopped, _ = run(tuple(stops), pieces)
    assert (shown, stopped) == (expected, bool(found))
