"""Arguments checked before a tool runs: every problem listed to the model (path,
expected, got), the tool not run, the loop ended after too many invalid calls; tools
whose parameters are pydantic models or attrs classes (one schema generator, the
arguments converted before the call). Over loopback, on every HTTP family."""

from __future__ import annotations

from typing import Any

import attrs
import jsonschema
import pydantic
import pytest
from support.wire_replies import FAMILIES, Family

from cuca import ArgumentProblem, Tool, ToolCall, ToolLoopError, ToolResult, UnifiedRequest
from cuca.testing import open_replay_server

REQUEST = UnifiedRequest.new("m").add_user_message("Weather in Paris?")


def get_weather(city: str, days: int = 1) -> str:
    """Weather of a city."""
    return f"{city}: 18 degrees for {days} days"


def test_tool_check_lists_every_problem_with_path_expected_and_got() -> None:
    tool = Tool.from_function(get_weather)
    assert tool.check({"city": "Paris"}) == ()
    assert tool.check({"days": "two"}) == (
        ArgumentProblem("$", "the required property city", "an object without it"),
        ArgumentProblem("$.days", "integer", '"two"'),
    )
    closed = {"type": "object", "properties": {}, "additionalProperties": False}
    strict = Tool("t", "", closed, dict)
    assert [str(p) for p in strict.check({"x": 1, "y": 2})] == [
        "$: expected no other properties, got properties x, y"
    ]


def test_tool_with_an_invalid_schema_is_refused_when_made() -> None:
    from cuca import ConfigurationError

    with pytest.raises(ConfigurationError, match="tool 't': invalid JSON Schema"):
        Tool("t", "", {"type": "object", "properties": {"a": {"type": 3}}}, dict)


async def run_loop(family: Family, replies: list[Any], **options: Any) -> tuple[list[Any], Any]:
    ran: list[str] = []

    def weather(city: str) -> str:
        """Weather of a city."""
        ran.append(city)
        return f"{city}: 18 degrees"

    items: list[Any] = []
    async with open_replay_server(replies) as server:
        async with family.client(server.url) as client:
            async with client.run_tools(REQUEST, [weather], **options) as stream:
                async for item in stream:
                    items.append(item)
    return [*items, ran], stream


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
async def test_tool_loop_invalid_arguments_do_not_run_the_tool_and_the_model_reads_why(
    family: Family,
) -> None:
    replies = [
        family.call_reply("weather", {"city": 3}, "call_a"),
        family.call_reply("weather", {"city": "Paris"}, "call_b"),
        family.text_reply("18 degrees in Paris."),
    ]
    items, stream = await run_loop(family, replies)
    ran = items.pop()
    results = [item for item in items if isinstance(item, ToolResult)]
    assert ran == ["Paris"]  # the wrong call never ran
    assert results[0].is_error
    assert results[0].output == 'invalid arguments for weather:\n- $.city: expected string, got 3'
    assert results[1] == ToolResult(results[1].tool_call_id, "Paris: 18 degrees")
    told = [m for m in stream.conversation.messages if m.role.value == "tool"]
    assert told[0].content[0].output == results[0].output  # what the model was sent
    assert stream.complete


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
async def test_tool_loop_gives_up_past_max_invalid_calls(family: Family) -> None:
    replies = [family.call_reply("weather", {"town": "Paris"}, "call_x")]  # repeated
    with pytest.raises(ToolLoopError) as caught:
        await run_loop(family, replies, max_invalid_calls=2, max_steps=8)
    error = caught.value
    assert isinstance(error.call, ToolCall) and error.call.name == "weather"
    assert error.call.arguments == {"town": "Paris"}
    assert error.problems == (
        ArgumentProblem("$", "the required property city", "an object without it"),
    )
    assert "weather was called with invalid arguments 3 times (max_invalid_calls=2)" in str(error)


class Inner(pydantic.BaseModel):
    celsius: int = pydantic.Field(ge=-90, le=60)


class Report(pydantic.BaseModel):
    city: str
    reading: Inner


@attrs.frozen
class Place:
    city: str
    country: str = "FR"


async def test_tool_from_function_takes_pydantic_and_attrs_parameters() -> None:
    got: list[Any] = []

    def record(report: Report, readings: list[Inner], place: Place) -> str:
        got.extend([report, readings, place])
        return "ok"

    tool = Tool.from_function(record)
    schema = tool.schema
    # a nested model's $ref resolves within the tool's own parameters schema
    assert schema["properties"]["report"]["properties"]["reading"] == {"$ref": "#/$defs/Inner"}
    assert set(schema["$defs"]) == {"Inner"}
    jsonschema.Draft202012Validator.check_schema(schema)
    good = {"report": {"city": "Paris", "reading": {"celsius": 18}},
            "readings": [{"celsius": 3}], "place": {"city": "Lyon"}}
    assert tool.check(good) == ()
    bad = {**good, "report": {"city": "Paris", "reading": {"celsius": 99}}}
    assert [p.path for p in tool.check(bad)] == ["$.report.reading.celsius"]
    assert await tool.call(good) == "ok"
    assert got == [Report(city="Paris", reading=Inner(celsius=18)), [Inner(celsius=3)],
                   Place("Lyon")]


class Even(pydantic.BaseModel):
    n: int

    @pydantic.field_validator("n")
    @classmethod
    def even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("n must be even")
        return value


async def test_tool_pydantic_validator_failure_is_an_invalid_arguments_error() -> None:
    from cuca.tools.tool import ToolArgumentsError

    def half(number: Even) -> int:
        return number.n // 2

    tool = Tool.from_function(half)
    assert tool.check({"number": {"n": 3}}) == ()  # the schema cannot say "even"
    with pytest.raises(ToolArgumentsError, match="n must be even"):
        await tool.call({"number": {"n": 3}})
