"""``PartialJson`` on its own (``cuca.partial``), I/O-free: when the text so far is
parsed again (docs/structured-output.md, "Partial objects while the JSON streams").
Fast; the property tests over any chunking are tests/test_partial.py's."""

from __future__ import annotations

import pytest

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


def test_partial_json_reports_only_a_changed_value() -> None:
    """A block that completes nothing new gives ``NOTHING``; prose before the braces
    decides nothing; a sign or a number at the end is held back; ``text`` is all that
    was fed."""
    parser = PartialJson()
    assert parser.feed("Sure, here:") is NOTHING  # not JSON at all
    parser = PartialJson()
    assert parser.feed('{"a": 1, ') == {"a": 1}
    assert parser.feed(" ") is NOTHING  # the same value
    assert parser.feed('"b": -') is NOTHING  # a sign: the number may go on
    assert parser.feed("2.5e1,") == {"a": 1, "b": -25.0}
    assert parser.text == '{"a": 1,  "b": -2.5e1,'


async def test_partials_give_each_value_once_and_skip_what_is_not_text() -> None:
    """``Partials`` yields the value each time it grows, then the parsed answer only
    when it differs from the last partial (a dict answer is not yielded twice); items
    that are not text are skipped; an answer that does not fit the schema ends without
    the parsed value."""
    from support.partials import Batches

    from cuca import Text, Thinking
    from cuca.partial import Partials
    from cuca.schema import output_schema

    schema = output_schema({"type": "object"})
    batches = [[Thinking("hmm"), Text('{"a": 1, ')], [Text('"b": 2}')]]
    assert [p async for p in Partials(Batches(batches), schema)] == [{"a": 1}, {"a": 1, "b": 2}]
    typed = output_schema({"type": "object", "required": ["c"]})
    batches = [[Text('{"a": 1}')]]
    assert [p async for p in Partials(Batches(batches), typed)] == [{"a": 1}]


def test_partial_object_reads_an_attrs_class_by_its_fields() -> None:
    """An attrs class's fields are read by the names its JSON has (a private field by
    its alias); a name the class has not is an ``AttributeError``."""
    import attrs
    import pytest

    from cuca.partial import PartialObject

    @attrs.frozen
    class Reading:
        city: str
        _station: str = ""

    view = PartialObject(Reading, {"city": "Oslo"})
    assert view.city == "Oslo" and view.station is None
    with pytest.raises(AttributeError, match="wind"):
        _ = view.wind
    assert PartialObject(dict, {}).decided("x") is False


async def test_partials_of_a_long_answer_end_on_the_whole_value() -> None:
    """Past 2,048 characters the last blocks may not have been parsed: the end of the
    stream gives the value of all of it, once (equal to the parsed answer, not given
    twice); a class's partials are ``PartialObject`` views of that class."""
    from support.partials import Batches

    from cuca import Text
    from cuca.partial import PartialObject, Partials
    from cuca.schema import output_schema

    text = '{"a": "' + "x" * 2100 + '", "b": 1}'
    batches = [[Text(text[:-2])], [Text(text[-2:])]]
    partials = [p async for p in Partials(Batches(batches), output_schema({"type": "object"}))]
    assert partials == [{"a": "x" * 2100}, {"a": "x" * 2100, "b": 1}]

    import attrs

    @attrs.frozen
    class Pair:
        a: str
        b: int

    typed = [p async for p in Partials(Batches(batches), output_schema(Pair))]
    assert isinstance(typed[0], PartialObject) and typed[0].of is Pair
    assert typed[-1] == Pair("x" * 2100, 1)


def test_partial_object_of_a_plain_class_knows_no_field() -> None:
    from cuca.partial import PartialObject

    class Plain:
        pass

    view = PartialObject(Plain, {"a": 1})
    assert view.a == 1
    with pytest.raises(AttributeError, match=r"^b$"):
        _ = view.b


def test_partial_json_decides_the_first_value_even_if_it_is_null_or_empty() -> None:
    """A first value of ``null`` is a change (from nothing decided); an answer cut after
    its opening brace ends on an empty object."""
    assert PartialJson().feed("null") is None
    parser = PartialJson()
    assert parser.feed("{") is NOTHING  # a brace alone completes nothing
    assert parser.end() == {}
