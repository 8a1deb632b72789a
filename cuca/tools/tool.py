"""Tools a model can call: a Python function (sync or async) with a JSON Schema.

``Tool.from_function(fn)`` reads the schema from the signature and type hints and the
description from the docstring; ``Tool(name, description, schema, function)`` takes
them as given. ``Tool.check`` lists what is wrong with a model's arguments against the
schema (``jsonschema``, one validator built per tool); ``Tool.call`` turns them into the
function's result as text. :func:`cuca.run_tools` does both for every
:class:`~cuca.types.ToolCall`.
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
import jsonschema
import trio

from cuca.convert import converter
from cuca.errors import ConfigurationError
from cuca.schema import describe_function, is_json_object_schema
from cuca.types import ToolDefinition

__all__ = ["ArgumentProblem", "Tool", "ToolArgumentsError", "ToolFailed"]

_values = converter.copy()
# a pydantic model, wherever it sits in a hint (list[Model], an attrs field), is built
# by its own model_validate (pydantic is never imported here)
_values.register_structure_hook_func(
    lambda t: isinstance(t, type) and callable(getattr(t, "model_validate", None)),
    lambda value, t: t.model_validate(value),
)


@attrs.frozen
class ArgumentProblem:
    """One thing wrong with a call's arguments: where (a JSON path, ``$.place.city``),
    what the schema expected there, and what the model sent (as JSON, shortened)."""

    path: str
    expected: str
    got: str

    def __str__(self) -> str:
        return f"{self.path}: expected {self.expected}, got {self.got}"


class ToolArgumentsError(Exception):
    """The arguments a model sent do not fit the tool's parameters (reported to the
    model as an error result, so that it can correct itself)."""

    def __init__(self, message: str, problems: tuple[ArgumentProblem, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


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


def _validator(tool: Tool) -> Any:
    """The ``jsonschema`` validator of ``tool``'s schema, built once (a schema that is not
    valid JSON Schema is refused when the tool is made)."""
    schema = dict(tool.schema)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        message = f"tool {tool.name!r}: invalid JSON Schema: {exc.message}"
        raise ConfigurationError(message) from None
    return cls(schema)


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
    needs_approval: bool | Callable[[Mapping[str, Any]], bool] = attrs.field(
        default=False, kw_only=True
    )
    """Whether a call must be approved before it runs (``run_tools(approve=...)``): a
    bool, or a function of the call's arguments (approval by risk)."""
    _validator: Any = attrs.field(
        init=False, repr=False, eq=False, default=attrs.Factory(_validator, takes_self=True)
    )

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        needs_approval: bool | Callable[[Mapping[str, Any]], bool] = False,
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
        return cls(tool_name, text, schema, function, convert, needs_approval=needs_approval)

    def definition(self) -> ToolDefinition:
        """What the model is told about this tool."""
        return ToolDefinition(self.name, self.description, self.schema)

    def approval_needed(self, arguments: Mapping[str, Any]) -> bool:
        """Whether a call with ``arguments`` must be approved before it runs."""
        needs = self.needs_approval
        return bool(needs(arguments)) if callable(needs) else needs

    def check(self, arguments: Mapping[str, Any]) -> tuple[ArgumentProblem, ...]:
        """Every way ``arguments`` break the tool's JSON Schema, in path order (empty
        when they fit)."""
        errors = self._validator.iter_errors(arguments)
        problems = (_problem(e) for e in sorted(errors, key=lambda e: list(map(str, e.path))))
        # jsonschema reports each missing required property apart; one problem names them all
        return tuple(dict.fromkeys(problems))

    async def call(self, arguments: Mapping[str, Any]) -> str:
        """Run the function on ``arguments`` and return its result as text.

        A sync function runs in a worker thread that cancellation does not abandon: a
        cancelled or timed-out call waits for the function to return (it can stop early
        by calling ``trio.from_thread.check_cancelled()``), so no thread outlives the
        loop. Raises :class:`ToolArgumentsError` for unusable arguments and whatever the
        function raises.
        """
        kwargs = self.convert(arguments)
        function = self.function
        if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            type(function).__call__  # an object whose __call__ is async
        ):
            result = await function(**kwargs)
        else:
            call = functools.partial(function, **kwargs)
            result = await trio.to_thread.run_sync(call)
            # a sync function that returned an awaitable other than a coroutine (trio
            # refuses a coroutine returned in a worker thread: make such a tool async)
            if inspect.isawaitable(result):
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


def _problem(error: jsonschema.ValidationError) -> ArgumentProblem:
    """An :class:`ArgumentProblem` from one ``jsonschema`` error."""
    path, rule = error.json_path, error.validator
    value: Any = error.validator_value
    schema: Any = error.schema
    if rule == "required" and isinstance(error.instance, Mapping):
        missing = [name for name in value if name not in error.instance]
        names = ", ".join(missing) or str(value)
        return ArgumentProblem(path, f"the required {_plural('property', missing)} {names}",
                               "an object without it")
    if rule == "additionalProperties" and isinstance(error.instance, Mapping):
        known = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        extra = [name for name in error.instance if name not in known]
        return ArgumentProblem(path, "no other properties", f"{_plural('property', extra)} "
                               + ", ".join(extra))
    if rule == "type":
        expected = value if isinstance(value, str) else " or ".join(map(str, value))
    else:
        expected = f"{rule} {_short(value)}"
    return ArgumentProblem(path, expected, _short(error.instance))


def _plural(word: str, items: list[str]) -> str:
    return word if len(items) == 1 else word.replace("y", "ies")


def _short(value: Any, limit: int = 80) -> str:
    """``value`` as compact JSON, cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_text(result: Any) -> str:
    """A tool's result as the text sent back to the model."""
    if isinstance(result, str):
        return result
    return json.dumps(_values.unstructure(result), ensure_ascii=False)
