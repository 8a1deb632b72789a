"""cuca.Tool: the JSON Schema a model sees, and how its arguments reach the function."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import attrs
import pytest

from cuca import ConfigurationError, Tool, ToolDefinition
from cuca.tools.tool import ToolArgumentsError


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


@attrs.frozen
class Place:
    city: str
    country: str | None = None


def get_weather(
    place: Place,
    unit: Unit = Unit.CELSIUS,
    days: Annotated[int, "how many days ahead"] = 1,
    hours: tuple[int, int] = (9, 17),
) -> dict[str, Any]:
    """Look up the weather forecast.

    Args:
        place: where to look,
            a city and maybe its country.
        unit: the temperature unit

    Returns the forecast.
    """
    return {"place": place, "unit": unit, "days": days, "hours": hours}


def test_tool_from_function_schema_and_description() -> None:
    tool = Tool.from_function(get_weather)
    assert tool.name == "get_weather"
    assert tool.description == "Look up the weather forecast.\n\nReturns the forecast."
    assert tool.schema == {
        "type": "object",
        "properties": {
            "place": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "country": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                },
                "required": ["city"],
                "additionalProperties": False,
                "description": "where to look, a city and maybe its country.",
            },
            "unit": {
                "type": "string",
                "enum": ["celsius", "fahrenheit"],
                "description": "the temperature unit",
                "default": "celsius",
            },
            "days": {"type": "integer", "description": "how many days ahead", "default": 1},
            "hours": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "integer"}],
                "minItems": 2,
                "maxItems": 2,
                "default": [9, 17],
            },
        },
        "required": ["place"],
    }
    assert tool.definition() == ToolDefinition("get_weather", tool.description, tool.schema)


def test_tool_schema_of_containers_and_literals() -> None:
    def f(
        names: list[str],
        scores: dict[str, float],
        flags: set[bool],
        mode: Literal["fast", "exact"],
        anything: Any,
        untyped,  # type: ignore[no-untyped-def]
        rest: tuple[str, ...] = (),
    ) -> None:
        """No Args section here."""

    props = Tool.from_function(f).schema["properties"]
    assert props["names"] == {"type": "array", "items": {"type": "string"}}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["flags"] == {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}
    assert props["mode"] == {"type": "string", "enum": ["fast", "exact"]}
    assert props["anything"] == props["untyped"] == {}
    assert props["rest"] == {"type": "array", "items": {"type": "string"}, "default": []}


def test_tool_from_function_refuses_what_json_cannot_fill() -> None:
    def star(*args: int) -> None: ...

    def keyed(table: dict[int, str]) -> None: ...

    def opaque(thing: object) -> None: ...

    with pytest.raises(ConfigurationError, match="parameter 'args' cannot be filled by name"):
        Tool.from_function(star)
    with pytest.raises(ConfigurationError, match=r"parameter 'table'.*keys are strings"):
        Tool.from_function(keyed)
    with pytest.raises(ConfigurationError, match=r"parameter 'thing'.*has no JSON Schema"):
        Tool.from_function(opaque)
    with pytest.raises(ConfigurationError, match="needs a name"):
        Tool.from_function(lambda x: x)
    assert Tool.from_function(lambda x: x, name="echo").name == "echo"


def test_tool_explicit_schema_must_be_an_object() -> None:
    with pytest.raises(ConfigurationError, match="must describe an object"):
        Tool("t", "d", {"type": "string"}, print)


async def test_tool_call_converts_arguments_to_the_hints() -> None:
    tool = Tool.from_function(get_weather)
    output = await tool.call({"place": {"city": "Paris"}, "unit": "fahrenheit", "hours": [8, 9]})
    assert output == (
        '{"place": {"city": "Paris", "country": null}, "unit": "fahrenheit", '
        '"days": 1, "hours": [8, 9]}'
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing argument for get_weather: place"),
        ({"place": {"city": "P"}, "color": "red"}, "unexpected arguments for get_weather: color"),
        ({"place": {"city": "P"}, "unit": "kelvin"}, "argument unit of get_weather:"),
        ({"place": {"town": "P"}}, "argument place of get_weather:"),
    ],
)
async def test_tool_call_unusable_arguments(arguments: Mapping[str, Any], message: str) -> None:
    with pytest.raises(ToolArgumentsError, match=message):
        await Tool.from_function(get_weather).call(arguments)


async def test_tool_call_explicit_schema_gets_raw_arguments() -> None:
    seen: list[dict[str, Any]] = []

    async def lookup(**arguments: Any) -> str:
        seen.append(arguments)
        return "found"

    tool = Tool("lookup", "Look it up.", {"type": "object"}, lookup)
    assert await tool.call({"q": {"nested": [1]}}) == "found"
    assert seen == [{"q": {"nested": [1]}}]
