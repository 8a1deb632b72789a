"""Partial objects while a structured answer streams (``stream.partial()``): for any
answer and any chunking, every partial is a prefix-consistent view of the final value
(a field once decided keeps its value) and the last one is ``Completion.parsed``; over
loopback on every HTTP family."""

from __future__ import annotations

import itertools
import json
from typing import Any

import attrs
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.partials import Batches, consistent
from support.wire_replies import FAMILIES, TEXT_FAMILIES, Family

from cuca import ConfigurationError, Text, UnifiedRequest
from cuca.partial import NOTHING, PartialJson, PartialObject, Partials
from cuca.schema import output_schema
from cuca.testing import open_replay_server

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.text(max_size=5), VALUES, max_size=5)


@st.composite
def answers(draw: st.DrawFn) -> tuple[Any, list[str]]:
    value = draw(OBJECTS)
    indent = draw(st.sampled_from([None, 1]))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=indent)
    points = draw(st.lists(st.integers(1, max(1, len(text) - 1)), unique=True, max_size=40))
    cuts = [0, *sorted(p for p in points if p < len(text)), len(text)]
    return value, [text[a:b] for a, b in itertools.pairwise(cuts) if b > a]


@given(answers())
def test_partial_json_every_partial_is_prefix_consistent_and_the_last_is_the_value(
    answer: tuple[Any, list[str]],
) -> None:
    value, pieces = answer
    parser = PartialJson()
    partials = [p for p in [*map(parser.feed, pieces), parser.end()] if p is not NOTHING]
    assert partials and partials[-1] == value
    for earlier, later in itertools.pairwise(partials):
        assert consistent(earlier, later)  # once decided, a field keeps its value
    assert all(consistent(p, value) for p in partials)


def test_partial_json_holds_a_number_back_until_it_ends() -> None:
    parser = PartialJson()
    assert parser.feed('{"n": 1') == {}
    assert parser.feed("2") is NOTHING
    assert parser.feed(', "s": "ab') == {"n": 12}
    assert parser.feed('c"}') == {"n": 12, "s": "abc"}


@attrs.frozen
class Forecast:
    city: str
    celsius: float
    tags: list[str]


@given(st.data())
@pytest.mark.parametrize("target", [Forecast, None], ids=["attrs", "dict"])
async def test_partial_last_partial_is_the_parsed_answer(target: Any, data: st.DataObject) -> None:
    forecast = data.draw(
        st.builds(
            Forecast,
            st.text(max_size=6),
            st.floats(-90, 60, allow_nan=False),
            st.lists(st.text(max_size=3), max_size=3),
        )
    )
    text = json.dumps(attrs.asdict(forecast))
    points = sorted(data.draw(st.lists(st.integers(1, len(text) - 1), unique=True, max_size=30)))
    cuts = [0, *points, len(text)]
    batches = [[Text(text[a:b])] for a, b in itertools.pairwise(cuts)]
    schema = output_schema(Forecast) if target else output_schema({"type": "object"})
    partials = [p async for p in Partials(Batches(batches), schema)]
    expected = forecast if target else attrs.asdict(forecast)
    assert partials[-1] == expected
    views = [p.values if isinstance(p, PartialObject) else p for p in partials[:-1]]
    assert all(consistent(v, attrs.asdict(forecast)) for v in views)


def test_partial_object_reads_decided_fields_and_none_for_the_rest() -> None:
    class Reading(pydantic.BaseModel):
        city: str
        celsius: float

    view = PartialObject(Reading, {"city": "Oslo"})
    assert view.city == "Oslo" and view.celsius is None
    assert view.decided("city") and not view.decided("celsius")
    with pytest.raises(AttributeError):
        _ = view.wind


REQUEST = UnifiedRequest.new("m").add_user_message("Weather?").set_output_schema(Forecast)
ANSWER = '{"city": "Paris", "celsius": 18.5, "tags": ["rain", "wind"]}'


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=[f.name for f in TEXT_FAMILIES])
async def test_partial_streams_the_answer_as_it_arrives(family: Family) -> None:
    pieces = [ANSWER[i : i + 4] for i in range(0, len(ANSWER), 4)]
    async with open_replay_server([family.text_reply(*pieces)]) as server:
        async with family.client(server.url) as client:
            async with client.generate_stream(REQUEST) as stream:
                partials = [p async for p in stream.partial()]
            done = await client.generate(REQUEST)
    assert partials[-1] == done.parsed == Forecast("Paris", 18.5, ["rain", "wind"])
    views = [p.values for p in partials[:-1]]
    assert views[:3] == [{}, {"city": "Paris"}, {"city": "Paris", "celsius": 18.5}]
    assert all(consistent(v, json.loads(ANSWER)) for v in views)
    assert stream.message.text() == ANSWER  # the whole turn is still there


async def test_partial_needs_an_output_schema() -> None:
    family = FAMILIES[0]
    async with open_replay_server([family.text_reply("hi")]) as server:
        async with family.client(server.url) as client:
            async with client.generate_stream(UnifiedRequest.new("m")) as stream:
                with pytest.raises(ConfigurationError, match="needs a request with an output"):
                    stream.partial()


def test_partial_json_parses_a_long_answer_in_linear_time_and_still_ends_on_the_value() -> None:
    """Past EXACT_UP_TO characters the text is parsed again only once it has grown by an
    eighth: a 20 kB answer in 4-character blocks gives about 200 partials, not 5,000."""
    value = {"rows": [{"id": i, "name": f"item {i}"} for i in range(700)]}
    text = json.dumps(value)
    parser = PartialJson()
    fed = [parser.feed(text[i : i + 4]) for i in range(0, len(text), 4)]
    partials = [p for p in [*fed, parser.end()] if p is not NOTHING]
    assert len(text) > 20_000 and len(partials) < 400
    assert partials[-1] == value
    assert all(consistent(a, b) for a, b in itertools.pairwise(partials))
