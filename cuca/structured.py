"""Structured output: a JSON Schema from an attrs class or pydantic model, and the
answer checked against it.

The schema an attrs class gives is strict in OpenAI's sense, so that every provider can
take it: each object lists all its fields as ``required`` and sets
``additionalProperties: false``; nested attrs classes are inlined. A field's
``metadata={"json_schema": {...}}`` is merged into its schema (bounds, patterns,
descriptions). The answer is validated with ``jsonschema`` and, when the schema came
from a class, structured into it with cattrs (or pydantic's ``model_validate``).
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .errors import ConfigurationError, OutputValidationError
from .types import OutputSchema

__all__ = ["json_schema_of", "output_schema", "parse_output"]

_SCALARS: Mapping[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def output_schema(
    schema: Mapping[str, Any] | type, *, name: str | None = None, strict: bool = True
) -> OutputSchema:
    """An :class:`OutputSchema` from a JSON Schema object, an attrs class or a pydantic
    model; a ``ConfigurationError`` for anything else."""
    if isinstance(schema, Mapping):
        return OutputSchema(name or "output", dict(schema), None, strict)
    if isinstance(schema, type):
        return OutputSchema(name or schema.__name__, json_schema_of(schema), schema, strict)
    raise ConfigurationError(
        f"an output schema is a JSON Schema dict, an attrs class or a pydantic model, "
        f"not {type(schema).__name__}"
    )


def json_schema_of(cls: type) -> dict[str, Any]:
    """The JSON Schema of an attrs class or a pydantic model."""
    model_json_schema = getattr(cls, "model_json_schema", None)
    if callable(model_json_schema):  # pydantic v2, never imported by cuca itself
        schema: dict[str, Any] = model_json_schema()
        return schema
    if not attrs.has(cls):
        raise ConfigurationError(f"{cls.__name__} is neither an attrs class nor a pydantic model")
    return _attrs_schema(cls, ())


def _attrs_schema(cls: type, seen: tuple[type, ...]) -> dict[str, Any]:
    if cls in seen:
        raise ConfigurationError(f"{cls.__name__} refers to itself: no finite JSON Schema")
    try:
        hints = typing.get_type_hints(cls)
    except NameError as exc:  # an annotation naming a class defined in a function
        message = f"cannot resolve the annotations of {cls.__name__}: {exc}"
        raise ConfigurationError(message) from None
    properties: dict[str, Any] = {}
    for field in attrs.fields(cls):
        prop = _schema(hints.get(field.name, Any), (*seen, cls))
        extra = field.metadata.get("json_schema")
        properties[field.name] = {**prop, **extra} if isinstance(extra, Mapping) else prop
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _schema(hint: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if hint is type(None):
        return {"type": "null"}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema(arg, seen) for arg in args]}
    if origin in (list, tuple, set, frozenset, Sequence) or hint in (list, tuple):
        item = args[0] if args else Any
        return {"type": "array", "items": _schema(item, seen)}
    if origin in (dict, Mapping):
        value = args[1] if len(args) == 2 else Any
        return {"type": "object", "additionalProperties": _schema(value, seen)}
    if isinstance(hint, type) and attrs.has(hint):
        return _attrs_schema(hint, seen)
    if hint is Any:
        return {}
    raise ConfigurationError(f"no JSON Schema for the type {hint!r}")


def parse_output(spec: OutputSchema, text: str) -> Any:
    """The answer ``text`` as a value: JSON, validated against ``spec.schema``, then
    structured into ``spec.target`` when there is one.

    Raises :class:`~cuca.errors.OutputValidationError`, which carries ``text``, when the
    answer is not JSON, does not validate, or does not fit the target class.
    """
    import jsonschema

    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise OutputValidationError(f"the answer is not JSON ({exc})", text) from None
    try:
        jsonschema.validate(value, dict(spec.schema))
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise OutputValidationError(f"at {where}: {exc.message}", text) from None
    except jsonschema.SchemaError as exc:
        raise ConfigurationError(f"the output schema is invalid: {exc.message}") from None
    if spec.target is None:
        return value
    return _structure(spec.target, value, text)


def _structure(target: type, value: Any, text: str) -> Any:
    model_validate = getattr(target, "model_validate", None)
    try:
        if callable(model_validate):
            return model_validate(value)
        from .convert import converter

        return converter.structure(value, target)
    except Exception as exc:  # cattrs' ClassValidationError, pydantic's ValidationError
        raise OutputValidationError(f"does not fit {target.__name__}: {exc}", text) from None
