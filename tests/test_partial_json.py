"""``PartialJson`` on its own (``cuca.partial``), I/O-free: when the text so far is
parsed again (docs/structured-output.md, "Partial objects while the JSON streams").
Fast; the property tests over any chunking are tests/test_partial.py's."""

from __future__ import annotations

from cuca.partial import EXACT_UP_TO, NOTHING, PartialJson


def entry(key: str, size: int) -> str:
    """``, "key": "yyy"`` of exactly ``size`` characters: a piece that completes a value."""
    head = f', "{key}": "'
    return head + "y" * (size - len(head) - 1) + '"'


def test_partial_json_past_2048_characters_parses_again_once_grown_by_an_eighth() -> None:
    """Up to 2,048 characters every block that may complete a value is parsed (the one
    that brings the text to exactly 2,048 too); past them, the text is parsed again only
    once it has grown by an eighth since the last parse (2,048 + 256 = 2,304), and the
    end of the stream gives the value of all of it."""
    assert EXACT_UP_TO == 2048
    parser = PartialJson()
    first = '{"a": "' + "x" * 1892 + '"'
    assert len(first) == 1900
    assert parser.feed(first) == {"a": "x" * 1892}
    at_limit = parser.feed(entry("b", 148))  # 2,048 characters
    assert isinstance(at_limit, dict) and set(at_limit) == {"a", "b"}
    assert parser.feed(entry("c", 255)) is NOTHING  # 2,303: not grown by an eighth yet
    grown = parser.feed(" ")  # 2,304
    assert isinstance(grown, dict) and set(grown) == {"a", "b", "c"}
    assert parser.end() is NOTHING  # all of it parsed already
    assert parser.feed(entry("d", 50)) is NOTHING
    ended = parser.end()
    assert isinstance(ended, dict) and set(ended) == {"a", "b", "c", "d"}
