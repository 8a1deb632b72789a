"""Tools a model can call: a Python function (sync or async) with a JSON Schema.

``Tool.from_function(fn)`` reads the schema from the signature and type hints and the
description from the docstring; ``Tool(name, description, schema, function)`` takes
them as given. ``Tool.call`` turns a model's arguments into the function's result as
text; :func:`cuca.run_tools` calls it for every :class:`~cuca.types.ToolCall`.
"""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs
import trio

from cuca.errors import ConfigurationError
from cuca.schema import describe_function, is_json_object_schema
from cuca.types import ToolDefinition

__all__ = ["Tool", "ToolArgumentsError", "ToolFailed"]

_values = cattrs.Converter()


class ToolArgumentsError(Exception):
    """The arguments a model sent do not fit the tool's parameters (reported to the
    model as an error result, so that it can correct itself)."""


class ToolFailed(Exception):
    """Raised by a tool to end its call as an error result whose text is exactly
    ``output`` (an MCP server's ``isError`` result, a tool's own refusal): the model
    reads it as it reads any tool error, without an exception's type name before it."""

    def __init__(self, output: str) -> None:
        super().__init__(output)
        self.output = output


def _check_schema(tool: Tool, attribute: Any, value: Mapping[str, Any]) -> None:
    if not is_json_object_schema(value):
        raise ConfigurationError(
            f'tool {tool.name!r}: the schema must describe an object ({{"type": "object"}})'
        )


@attrs.frozen
class Tool:
    """A tool: the definition the model sees and the function that runs it.

    ``function`` takes the arguments as keyword arguments and returns a string (sent as
    is) or any JSON-serialisable value, attrs instances included (sent as JSON). It may
    be sync (run in a worker thread) or async. A tool built from a schema gets the
    arguments as the model sent them; one from :meth:`from_function` gets them
    converted to its type hints (attrs classes, enums, lists...).
    """

    name: str
    description: str
    schema: Mapping[str, Any] = attrs.field(validator=_check_schema, hash=False)
    function: Callable[..., Any] = attrs.field(repr=False)
    convert: Callable[[Mapping[str, Any]], dict[str, Any]] = attrs.field(
        default=dict, repr=False, eq=False
    )

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """A tool from ``function``: its name, its docstring as description (a
        Google-style ``Args:`` section describes the parameters) and the JSON Schema of
        its parameters from the type hints. A parameter without a hint takes any value;
        one whose type has no JSON Schema is a :class:`ConfigurationError`."""
        tool_name = name or getattr(function, "__name__", "")
        if not tool_name or tool_name == "<lambda>":
            raise ConfigurationError("a tool needs a name: pass name= for a lambda")
        schema, doc = describe_function(function, tool_name)
        convert = functools.partial(_convert, function, tool_name)
        text = doc if description is None else description
        return cls(tool_name, text, schema, function, convert)

    def definition(self) -> ToolDefinition:
        """What the model is told about this tool."""
        return ToolDefinition(self.name, self.description, self.schema)

    async def call(self, arguments: Mapping[str, Any]) -> str:
        """Run the function on ``arguments`` and return its result as text.

        A sync function runs in a worker thread that cancellation does not abandon: a
        cancelled or timed-out call waits for the function to return (it can stop early
        by calling ``trio.from_thread.check_cancelled()``), so no thread outlives the
        loop. Raises :class:`ToolArgumentsError` for unusable arguments and whatever the
        function raises.
        """
        kwargs = self.convert(arguments)
        if inspect.iscoroutinefunction(self.function):
            result = await self.function(**kwargs)
        else:
            call = functools.partial(self.function, **kwargs)
            result = await trio.to_thread.run_sync(call)
            if inspect.isawaitable(result):  # an object whose __call__ is async
                result = await result
        return _as_text(result)


def as_tool(value: Tool | Callable[..., Any]) -> Tool:
    """``value`` itself, or the tool made from a plain function."""
    return value if isinstance(value, Tool) else Tool.from_function(value)


def _convert(
    function: Callable[..., Any], name: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments for ``function``, converted to its type hints."""
    signature = inspect.signature(function)
    unknown = sorted(set(arguments) - set(signature.parameters))
    if unknown:
        raise ToolArgumentsError(f"unexpected arguments for {name}: {', '.join(unknown)}")
    hints = typing.get_type_hints(function)
    kwargs: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.name not in arguments:
            if param.default is param.empty:
                raise ToolArgumentsError(f"missing argument for {name}: {param.name}")
            continue
        value = arguments[param.name]
        hint = hints.get(param.name, Any)
        try:
            kwargs[param.name] = value if hint is Any else _values.structure(value, hint)
        except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
            detail = (
                cattrs.transform_error(exc) if isinstance(exc, cattrs.ClassValidationError) else exc
            )
            raise ToolArgumentsError(f"argument {param.name} of {name}: {detail}") from None
    return kwargs


def _as_text(result: Any) -> str:
    """A tool's result as the text sent back to the model."""
    if isinstance(result, str):
        return result
    return json.dumps(_values.unstructure(result), ensure_ascii=False)
