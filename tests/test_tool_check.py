"""``cuca.Tool`` on its own, without a model: the problems ``check`` lists (what the model
reads when its arguments do not fit, docs/tools.md "Arguments checked before a tool
runs"), the arguments converted to a function's hints, the result as text, and what is
refused when the tool is made. Fast: no server, no loop (the loop over loopback is
tests/test_tool_guard.py's and tests/test_tools.py's)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from cuca import ArgumentProblem, ConfigurationError, Tool, ToolDefinition
from cuca.tools.tool import ToolArgumentsError, ToolFailed, as_tool


def forecast(city: str, days: int = 1) -> str:
    """Forecast of a city."""
    return f"{city}: sunny for {days} days"


class Units(enum.Enum):
    CELSIUS = "celsius"


@attrs.frozen
class Place:
    city: str


NEEDS_A_NAME = r"error: a tool needs a name: pass name= for a lambda$"


def schema_tool(schema: Mapping[str, Any]) -> Tool:
    return Tool("t", "a tool", {"type": "object", **schema}, dict)


def test_tool_check_names_one_or_several_missing_properties() -> None:
    """One required property missing is named in the singular, several in the plural,
    in the schema's order; a property present is not named."""
    tool = schema_tool({"properties": {"a": {}, "b": {}, "c": {}}, "required": ["a", "b", "c"]})
    assert tool.check({"b": 1}) == (
        ArgumentProblem("$", "the required properties a, c", "an object without it"),
    )
    assert tool.check({"a": 1, "b": 1}) == (
        ArgumentProblem("$", "the required property c", "an object without it"),
    )


def test_tool_check_names_one_or_several_unknown_properties() -> None:
    """Properties the schema closes out are named: one in the singular, several in the
    plural, the known ones left out."""
    tool = schema_tool({"properties": {"known": {}}, "additionalProperties": False})
    assert tool.check({"known": 1, "x": 1}) == (
        ArgumentProblem("$", "no other properties", "property x"),
    )
    assert str(tool.check({"known": 1, "x": 1, "y": 2})[0]) == (
        "$: expected no other properties, got properties x, y"
    )
    closed = schema_tool({"additionalProperties": False})  # no properties at all
    assert closed.check({"x": 1}) == (ArgumentProblem("$", "no other properties", "property x"),)


def test_tool_check_says_what_each_rule_expected() -> None:
    """A type is named (several joined by ``or``); another rule by its keyword and its
    value; what came is the model's value as JSON, non-ASCII text as written."""
    tool = schema_tool({
        "properties": {
            "name": {"type": ["string", "null"]},
            "count": {"type": "integer", "minimum": 1},
            "tags": {"type": "array", "maxItems": 1},
        }
    })
    assert tool.check({"name": 3, "count": 0, "tags": ["é", "b"]}) == (
        ArgumentProblem("$.count", "minimum 1", "0"),
        ArgumentProblem("$.name", "string or null", "3"),
        ArgumentProblem("$.tags", "maxItems 1", '["é", "b"]'),
    )


def test_tool_check_lists_the_problems_in_path_order() -> None:
    tool = schema_tool({"properties": {k: {"type": "integer"} for k in "cab"}})
    assert [p.path for p in tool.check({"c": "x", "a": "x", "b": "x"})] == ["$.a", "$.b", "$.c"]


def test_tool_check_shortens_a_long_value_to_80_characters() -> None:
    """What the model sent is shown as compact JSON, cut at 80 characters (``...`` at
    the end); a value of 80 characters is shown whole."""
    tool = schema_tool({"properties": {"n": {"type": "integer"}}})
    (long,) = tool.check({"n": "x" * 100})
    assert long.got == '"' + "x" * 76 + "..."
    assert len(long.got) == 80
    (whole,) = tool.check({"n": "x" * 78})
    assert whole.got == '"' + "x" * 78 + '"'
    (nested,) = tool.check({"n": {"a": [1, 2]}})
    assert nested.got == '{"a": [1, 2]}'


def test_tool_check_shows_a_value_json_cannot_write_as_its_text() -> None:
    """``Tool.check`` is public: arguments a program built itself may hold values JSON
    has no type for (a date); the problem shows such a value as its text instead of
    failing to list the problems."""
    import datetime

    tool = schema_tool({"properties": {"n": {"type": "integer"}}})
    (problem,) = tool.check({"n": datetime.date(2026, 1, 1)})
    assert problem.got == '"2026-01-01"'


def test_tool_arguments_converted_name_what_is_wrong() -> None:
    """A tool from a function refuses arguments it has no parameter for, a missing one
    without a default, and a value its hint cannot take, naming the function and the
    parameter."""
    tool = Tool.from_function(forecast)
    with pytest.raises(ToolArgumentsError, match=r"^unexpected arguments for forecast: a, b$"):
        tool.convert({"city": "Paris", "b": 1, "a": 2})
    with pytest.raises(ToolArgumentsError, match=r"^missing argument for forecast: city$"):
        tool.convert({"days": 2})
    with pytest.raises(ToolArgumentsError, match=r"^argument days of forecast: "):
        tool.convert({"city": "Paris", "days": "two"})
    assert tool.convert({"city": "Paris"}) == {"city": "Paris"}  # the default is the function's


async def test_tool_call_converts_to_the_hints_and_returns_text() -> None:
    """Arguments become the hints' types (an attrs class, an enum); a ``str`` result is
    sent as is, anything else as JSON (attrs instances and enums included, non-ASCII
    as written)."""

    def where(place: Place, units: Units) -> dict[str, Any]:
        return {"place": place, "units": units, "note": "été"}

    tool = Tool.from_function(where)
    text = await tool.call({"place": {"city": "Nîmes"}, "units": "celsius"})
    assert text == '{"place": {"city": "Nîmes"}, "units": "celsius", "note": "été"}'
    assert await Tool.from_function(forecast).call({"city": "Paris"}) == "Paris: sunny for 1 days"


async def test_tool_call_runs_sync_async_and_awaitable_results() -> None:
    """A sync function runs in a worker thread; an async one is awaited; an object
    whose ``__call__`` is async is awaited too (it was handed to the worker thread, which
    refused it)."""
    import threading

    main = threading.get_ident()
    seen: list[int] = []

    def sync(x: int) -> int:
        seen.append(threading.get_ident())
        return x + 1

    async def asynchronous(x: int) -> int:
        return x + 2

    class Awaitable:
        __name__ = "awaitable"

        async def __call__(self, x: int) -> int:
            return x + 3

    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert await Tool("s", "", schema, sync).call({"x": 1}) == "2"
    assert seen and seen[0] != main
    assert await Tool("a", "", schema, asynchronous).call({"x": 1}) == "3"
    assert await Tool("w", "", schema, Awaitable()).call({"x": 1}) == "4"


def test_tool_from_function_names_and_describes_it() -> None:
    """The tool is named after the function (or ``name=``) and described by its
    docstring (or ``description=``); a lambda needs ``name=``."""
    tool = Tool.from_function(forecast)
    assert tool.definition() == ToolDefinition("forecast", "Forecast of a city.", tool.schema)
    named = Tool.from_function(forecast, name="weather", description="Weather.")
    assert (named.name, named.description) == ("weather", "Weather.")
    assert Tool.from_function(forecast, description="").description == ""
    with pytest.raises(ConfigurationError, match=NEEDS_A_NAME):
        Tool.from_function(lambda: "x")
    assert Tool.from_function(lambda: "x", name="x").name == "x"
    assert as_tool(forecast).name == "forecast" and as_tool(tool) is tool


def test_tool_needs_approval_by_flag_or_by_the_arguments() -> None:
    assert not Tool.from_function(forecast).approval_needed({"city": "Paris"})
    assert Tool.from_function(forecast, needs_approval=True).approval_needed({})
    risky = Tool.from_function(forecast, needs_approval=lambda args: args.get("days", 1) > 3)
    assert risky.approval_needed({"days": 7}) and not risky.approval_needed({"days": 1})
    assert risky.approval_needed({"days": 7}) is True


def test_tool_schema_must_describe_an_object() -> None:
    with pytest.raises(ConfigurationError, match="tool 't': the schema must describe an object"):
        Tool("t", "", {"type": "string"}, dict)
    with pytest.raises(ConfigurationError, match="tool 't': invalid JSON Schema: 3 is not valid"):
        Tool("t", "", {"type": "object", "properties": {"a": {"type": 3}}}, dict)


def test_tool_failed_carries_its_text_and_arguments_error_its_problems() -> None:
    failed = ToolFailed("no station")
    assert failed.output == "no station" and str(failed) == "no station"
    problem = ArgumentProblem("$", "integer", '"x"')
    error = ToolArgumentsError("bad", (problem,))
    assert error.problems == (problem,) and str(error) == "bad"
    assert ToolArgumentsError("bad").problems == ()


@attrs.frozen
class Row:
    n: int


async def test_tool_arguments_of_an_attrs_class_say_where_they_break() -> None:
    """A value an attrs parameter cannot take is named by its path inside it."""

    def insert(row: Row) -> str:
        return "ok"

    tool = Tool.from_function(insert)
    with pytest.raises(ToolArgumentsError) as caught:
        tool.convert({"row": {"n": "x"}})
    assert str(caught.value) == (
        "argument row of insert: ['invalid value for type, expected int @ $.n']"
    )


class Ready:
    """An awaitable that is not a coroutine (trio refuses a coroutine returned from a
    worker thread; another awaitable it hands back)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __await__(self) -> Any:
        return self.value
        yield  # a generator: awaiting it gives the value at once


async def test_tool_sync_function_returning_an_awaitable_is_awaited() -> None:
    tool = Tool("t", "", {"type": "object"}, lambda x: Ready(x * 2))
    assert await tool.call({"x": 4}) == "8"


def test_tool_from_a_callable_without_a_name_needs_one() -> None:
    """A callable object has no ``__name__``: it is refused for its name, as a lambda; a
    function whose parameters cannot come from JSON is refused naming the tool."""

    class Nameless:
        def __call__(self) -> str:
            return "x"

    with pytest.raises(ConfigurationError, match=NEEDS_A_NAME):
        Tool.from_function(Nameless())

    def spread(*args: int) -> int:
        return 0

    with pytest.raises(ConfigurationError, match="tool 'spread': parameter 'args'"):
        Tool.from_function(spread)
