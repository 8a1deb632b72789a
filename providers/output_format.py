"""How each wire asks for an answer that follows a JSON Schema (the request's
:class:`~cuca.types.OutputSchema`). Each adapter calls the helper for its wire.

=========================  ===========================================================
wire                       request fields
=========================  ===========================================================
OpenAI chat (vLLM,         ``response_format: {"type": "json_schema", "json_schema":
LM Studio, llama.cpp)      {"name", "schema", "strict"}}``
Responses                  ``text: {"format": {"type": "json_schema", "name", "schema",
                           "strict"}}``
DeepSeek (json_object)     ``response_format: {"type": "json_object"}`` and the schema in
                           a system message (weaker: nothing enforces the schema)
Anthropic                  ``output_config: {"format": {"type": "json_schema", "schema"}}``
Gemini                     ``generationConfig: {"responseMimeType": "application/json",
                           "responseJsonSchema"}``
llama.cpp ``/completion``  ``json_schema``
=========================  ===========================================================
"""

from __future__ import annotations

import json
from typing import Any

from cuca.errors import ConfigurationError
from cuca.types import OutputSchema

__all__ = [
    "anthropic_format",
    "chat_response_format",
    "gemini_fields",
    "json_object_instruction",
    "refuse",
    "responses_text_format",
]


def chat_response_format(spec: OutputSchema) -> dict[str, Any]:
    """``response_format`` of ``/chat/completions`` with a JSON Schema."""
    schema = {"name": spec.name, "schema": dict(spec.schema), "strict": spec.strict}
    return {"type": "json_schema", "json_schema": schema}


def responses_text_format(spec: OutputSchema) -> dict[str, Any]:
    """``text`` of ``/responses`` with a JSON Schema format."""
    fmt = {"type": "json_schema", "name": spec.name, "schema": dict(spec.schema)}
    return {"format": {**fmt, "strict": spec.strict}}


def json_object_instruction(spec: OutputSchema) -> str:
    """The system text that carries the schema on a ``json_object``-only server."""
    schema = json.dumps(dict(spec.schema), ensure_ascii=False)
    return (
        f"Answer with one JSON object only (no prose, no code fence), named {spec.name}, "
        f"that validates against this JSON Schema: {schema}"
    )


def anthropic_format(spec: OutputSchema) -> dict[str, Any]:
    """``output_config.format`` of Anthropic's Messages API."""
    return {"type": "json_schema", "schema": dict(spec.schema)}


def gemini_fields(spec: OutputSchema) -> dict[str, Any]:
    """The ``generationConfig`` keys of Gemini's JSON mode with a schema."""
    return {"responseMimeType": "application/json", "responseJsonSchema": dict(spec.schema)}


def refuse(provider: str, spec: OutputSchema | None) -> None:
    """A ``ConfigurationError``, before any byte is sent, when a backend that cannot
    constrain its answer gets a request with an output schema."""
    if spec is not None:
        raise ConfigurationError(
            f"{provider} cannot constrain its answer to a JSON Schema (output schema "
            f"{spec.name!r}): remove it with set_output_schema(None) or use another backend"
        )
