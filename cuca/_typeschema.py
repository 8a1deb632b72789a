"""JSON Schema from Python types: one generator for the two places cuca needs one.

- A tool's parameters (:func:`describe_function`, for :meth:`cuca.Tool.from_function`):
  a parameter or attrs field with a default is optional and its default is stated, so
  the model may leave it out.
- An answer's shape (:func:`json_schema_of`, for ``set_output_schema``): *strict* in
  OpenAI's sense, so that every provider can take it: each object lists all its fields
  as ``required`` and sets ``additionalProperties: false``.

Both read the same types the same way: strings, numbers, booleans, lists, tuples, sets,
string-keyed dicts, ``Literal``, enums, unions with ``None``, ``Annotated`` notes,
``Any``, and attrs classes (inlined; a field's ``metadata={"json_schema": {...}}`` is
merged into its schema: bounds, patterns, descriptions). A pydantic model gives its own
``model_json_schema()``. Anything else is refused with a
:class:`~cuca.errors.ConfigurationError`, because a schema that says less than the code
needs makes the model send values that cannot be used.

A floor below the data types (it imports none of them), so that
``UnifiedRequest.set_output_schema(MyClass)`` derives its schema itself. The public face
is :mod:`cuca.schema`.
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

__all__ = [
    "JsonSchema",
    "describe_function",
    "is_json_object_schema",
    "json_schema_of",
    "parameter_docs",
    "schema_for",
]

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
_SETS = (set, frozenset, collections.abc.Set)
_OBJECTS = (dict, collections.abc.Mapping)


def schema_for(hint: Any, *, strict: bool = False) -> JsonSchema:
    """The JSON Schema of values of type ``hint``; ``TypeError`` if there is none.

    ``strict``: every attrs field is required and no default is stated (an answer's
    shape); otherwise a field with a default is optional (a tool's parameters).

    A pydantic model's ``$defs`` (its nested models) are gathered at the root of the
    schema returned, where its ``#/$defs/...`` references point."""
    walk = _Walk(strict)
    return walk.rooted(walk.schema(hint))


@attrs.frozen
class _Walk:
    strict: bool
    seen: tuple[type, ...] = ()
    defs: JsonSchema = attrs.field(factory=dict)
    """The ``$defs`` of the pydantic models met so far, shared by the whole walk."""

    def rooted(self, schema: JsonSchema) -> JsonSchema:
        """``schema`` as a root: with the ``$defs`` gathered during the walk."""
        return {**schema, "$defs": dict(self.defs)} if self.defs else schema

    def _pydantic(self, model: type, model_json_schema: Callable[[], JsonSchema]) -> JsonSchema:
        schema = dict(model_json_schema())
        for name, definition in schema.pop("$defs", {}).items():
            if self.defs.setdefault(name, definition) != definition:
                raise TypeError(f"two different models are named {name!r}: rename one")
        return schema

    def schema(self, hint: Any) -> JsonSchema:
        if hint in _SCALARS:
            return dict(_SCALARS[hint])
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Annotated:
            schema = self.schema(args[0])
            notes = [a for a in args[1:] if isinstance(a, str)]
            return {**schema, "description": notes[0]} if notes else schema
        if origin is typing.Literal:
            return _literal(args)
        if origin is typing.Union or origin is types.UnionType:
            return {"anyOf": [self.schema(arg) for arg in args]}
        if origin is tuple and not self.strict:
            return self._tuple(args)
        if origin in _ARRAYS or hint in _ARRAYS or origin is tuple or hint is tuple:
            items = self.schema(args[0]) if args else {}
            unique = not self.strict and (origin in _SETS or hint in _SETS)
            return {"type": "array", "items": items, **({"uniqueItems": True} if unique else {})}
        if origin in _OBJECTS or hint in _OBJECTS:
            if args and args[0] is not str:
                raise TypeError(f"{hint!r}: JSON object keys are strings")
            return {"type": "object", "additionalProperties": self.schema(args[1]) if args else {}}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return _literal(tuple(member.value for member in hint))
        if isinstance(hint, type) and attrs.has(hint):
            return self._attrs_class(hint)
        model_json_schema = getattr(hint, "model_json_schema", None)
        if isinstance(hint, type) and callable(model_json_schema):  # pydantic, not imported
            return self._pydantic(hint, model_json_schema)
        raise TypeError(f"{hint!r} has no JSON Schema")

    def _tuple(self, args: tuple[Any, ...]) -> JsonSchema:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return {"type": "array", "items": self.schema(args[0]) if args else {}}
        items = [self.schema(arg) for arg in args]
        return {
            "type": "array",
            "prefixItems": items,
            "minItems": len(items),
            "maxItems": len(items),
        }

    def _attrs_class(self, cls: type) -> JsonSchema:
        if cls in self.seen:
            raise TypeError(f"{cls.__name__} refers to itself: no finite JSON Schema")
        inner = attrs.evolve(self, seen=(*self.seen, cls))
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except NameError as exc:  # an annotation naming a class defined in a function
            raise TypeError(f"cannot resolve the annotations of {cls.__name__}: {exc}") from None
        properties: JsonSchema = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            if not field.init:
                continue
            name = field.alias or field.name
            schema = inner.schema(hints.get(field.name, Any))
            extra = field.metadata.get("json_schema")
            if isinstance(extra, Mapping):
                schema = {**schema, **extra}
            if self.strict:
                properties[name] = schema
                required.append(name)
                continue
            properties[name] = _with_default(schema, field.default)
            if field.default is attrs.NOTHING:
                required.append(name)
        schema = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        return {**schema, "additionalProperties": False}


def _literal(values: tuple[Any, ...]) -> JsonSchema:
    kinds = {type(v) for v in values}
    schema: JsonSchema = {"enum": list(values)}
    if len(kinds) == 1 and (kind := kinds.pop()) in _SCALARS:
        schema = {**_SCALARS[kind], **schema}
    return schema


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
    walk = _Walk(strict=False)
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigurationError(
                f"tool {name!r}: parameter {param.name!r} cannot be filled by name from JSON"
            )
        try:
            schema = walk.schema(hints.get(param.name, Any))
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
    return walk.rooted(parameters), description


def is_json_object_schema(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` describes a JSON object (what every provider takes for tools)."""
    return schema.get("type") == "object"


def json_schema_of(cls: type) -> dict[str, Any]:
    """The strict JSON Schema of an attrs class or a pydantic model."""
    if not attrs.has(cls) and not callable(getattr(cls, "model_json_schema", None)):
        raise ConfigurationError(f"{cls.__name__} is neither an attrs class nor a pydantic model")
    try:
        return schema_for(cls, strict=True)
    except TypeError as exc:
        raise ConfigurationError(str(exc)) from None
