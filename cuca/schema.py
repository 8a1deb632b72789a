"""JSON Schema from Python types, and answers checked against it.

The generator is :mod:`cuca._typeschema` (a floor below the data types, re-exported
here); an :class:`~cuca.types.OutputSchema` is built by :meth:`OutputSchema.of
<cuca.types.OutputSchema.of>` (:func:`output_schema` here). The answer is validated
with ``jsonschema`` and, when the schema came from a class, structured into it with
cattrs (or pydantic's ``model_validate``): :func:`parse_output`.
"""

from __future__ import annotations

import json
from typing import Any

from ._typeschema import (
    JsonSchema,
    describe_function,
    is_json_object_schema,
    json_schema_of,
    parameter_docs,
    schema_for,
)
from .errors import ConfigurationError, OutputValidationError
from .types import OutputSchema

__all__ = [
    "JsonSchema",
    "describe_function",
    "is_json_object_schema",
    "json_schema_of",
    "output_schema",
    "parameter_docs",
    "parse_output",
    "schema_for",
]

output_schema = OutputSchema.of
"""An :class:`OutputSchema` from a JSON Schema object, an attrs class or a pydantic model
(:meth:`OutputSchema.of`)."""


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
