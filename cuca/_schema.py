"""JSON Schema for the parameters of a Python function, from its type hints.

I/O-free and small on purpose: the types a model can fill from JSON (strings, numbers,
booleans, lists, tuples, string-keyed dicts, ``Literal``, enums, unions with ``None``,
attrs classes) map to the schema a provider expects; anything else is refused with a
:class:`~cuca.errors.ConfigurationError` naming the parameter, because a schema that
says less than the function needs makes the model send arguments that cannot be used.
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .errors import ConfigurationError

__all__ = ["describe_function", "parameter_docs", "schema_for"]

JsonSchema = dict[str, Any]

_SCALARS: dict[Any, JsonSchema] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
}
_ARRAYS = (list, set, frozenset, collections.abc.Sequence, collections.abc.Set)
_OBJECTS = (dict, collections.abc.Mapping)


def schema_for(hint: Any) -> JsonSchema:
    """The JSON Schema of values of type ``hint``; ``TypeError`` if there is none."""
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = schema_for(args[0])
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**schema, "description": notes[0]} if notes else schema
    if origin is typing.Literal:
        return _literal(args)
    if origin is typing.Union or origin is types.UnionType:
        return _union(args)
    if origin is tuple:
        return _tuple(args)
    if origin in _ARRAYS or hint in _ARRAYS:
        items = schema_for(args[0]) if args else {}
        unique = origin in (set, frozenset, collections.abc.Set) or hint in (set, frozenset)
        return {"type": "array", "items": items, **({"uniqueItems": True} if unique else {})}
    if origin in _OBJECTS or hint in _OBJECTS:
        if args and args[0] is not str:
            raise TypeError(f"{hint!r}: JSON object keys are strings")
        return {"type": "object", "additionalProperties": schema_for(args[1]) if args else {}}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _literal(tuple(member.value for member in hint))
    if isinstance(hint, type) and attrs.has(hint):
        return _attrs_class(hint)
    raise TypeError(f"{hint!r} has no JSON Schema")


def _literal(values: tuple[Any, ...]) -> JsonSchema:
    kinds = {type(v) for v in values}
    schema: JsonSchema = {"enum": list(values)}
    if len(kinds) == 1 and (kind := kinds.pop()) in _SCALARS:
        schema = {**_SCALARS[kind], **schema}
    return schema


def _union(args: tuple[Any, ...]) -> JsonSchema:
    return {"anyOf": [schema_for(arg) for arg in args]}


def _tuple(args: tuple[Any, ...]) -> JsonSchema:
    if not args or (len(args) == 2 and args[1] is Ellipsis):
        return {"type": "array", "items": schema_for(args[0]) if args else {}}
    items = [schema_for(arg) for arg in args]
    return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}


def _attrs_class(cls: type) -> JsonSchema:
    hints = typing.get_type_hints(cls, include_extras=True)
    properties: JsonSchema = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        name = field.alias or field.name
        properties[name] = _with_default(schema_for(hints.get(field.name, Any)), field.default)
        if field.default is attrs.NOTHING:
            required.append(name)
    schema: JsonSchema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return {**schema, "additionalProperties": False}


def _with_default(schema: JsonSchema, default: Any) -> JsonSchema:
    """Add ``default`` to ``schema`` when it is a plain JSON value (not a factory)."""
    if default is attrs.NOTHING or default is inspect.Parameter.empty:
        return schema
    if isinstance(default, enum.Enum):
        default = default.value
    try:
        default = json.loads(json.dumps(default))  # a tuple becomes the list JSON has
    except (TypeError, ValueError):
        return schema
    return {**schema, "default": default}


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)(?:\s*\([^)]*\))?\s*:\s*(.+)$")


def parameter_docs(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and the per-parameter notes of a
    Google-style ``Args:`` section (continuation lines are joined)."""
    lines = inspect.cleandoc(doc).splitlines()
    index = next((i for i, line in enumerate(lines) if _ARGS_HEADER.match(line)), None)
    if index is None:
        return "\n".join(lines).strip(), {}
    notes: dict[str, str] = {}
    last: str | None = None
    end = len(lines)
    for offset, line in enumerate(lines[index + 1 :], index + 1):
        match = _ARG_LINE.match(line)
        if match and len(line) - len(line.lstrip()) <= 4:
            last = match.group(1).lstrip("*")
            notes[last] = match.group(2).strip()
        elif line.strip() and line.startswith(" ") and last is not None:
            notes[last] += " " + line.strip()
        elif line.strip():
            end = offset
            break
    description = "\n".join(lines[:index] + lines[end:]).strip()
    return description, notes


def describe_function(fn: Callable[..., Any], name: str) -> tuple[JsonSchema, str]:
    """The parameters schema and the description of ``fn``, for the tool ``name``."""
    description, notes = parameter_docs(inspect.getdoc(fn) or "")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError) as exc:
        raise ConfigurationError(f"tool {name!r}: cannot read the type hints ({exc})") from exc
    properties: JsonSchema = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigurationError(
                f"tool {name!r}: parameter {param.name!r} cannot be filled by name from JSON"
            )
        try:
            schema = schema_for(hints.get(param.name, Any))
        except TypeError as exc:
            raise ConfigurationError(f"tool {name!r}: parameter {param.name!r}: {exc}") from None
        if param.name in notes and "description" not in schema:
            schema["description"] = notes[param.name]
        properties[param.name] = _with_default(schema, param.default)
        if param.default is param.empty:
            required.append(param.name)
    parameters: JsonSchema = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return parameters, description


def is_json_object_schema(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` describes a JSON object (what every provider takes for tools)."""
    return schema.get("type") == "object"
