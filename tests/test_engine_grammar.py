"""Structured output on the local engine: decoding constrained by a grammar built from
the JSON Schema makes even SmolLM2-135M answer with valid JSON, every time (and Gemma 3
270M, a base model with a vocabulary five times larger)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import trio
from support.models import load_model

from cuca import (
    ConfigurationError,
    CucaClient,
    LocalModel,
    OutputValidationError,
    ProviderEndpoint,
    SamplingConfig,
    Text,
    UnifiedRequest,
)
from cuca.engine import default_model_path
from cuca.engine.grammar import MAX_ENUMERATED, bounded_number_rule, gbnf_for
from cuca.types import OutputSchema

pytestmark = pytest.mark.slow

SEEDS = range(1, 21)


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


NAME = {"type": "string", "maxLength": 16}
PERCENT = {"type": "integer", "minimum": 0, "maximum": 100}
SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "nested_objects": (
        "Describe a person and where they live, as JSON.",
        obj({"person": obj({"name": NAME, "address": obj({"city": NAME, "country": NAME})})}),
    ),
    "arrays": (
        "List a few fruits, as JSON.",
        obj(
            {
                "fruits": {"type": "array", "items": NAME, "minItems": 1, "maxItems": 4},
                "counts": {"type": "array", "items": PERCENT, "maxItems": 4},
            }
        ),
    ),
    "enums": (
        "Pick a color and a size for a T-shirt, as JSON.",
        obj(
            {
                "color": {"enum": ["red", "green", "blue"]},
                "size": {"type": "string", "enum": ["S", "M", "L", "XL"]},
            }
        ),
    ),
    "bounded_numbers": (
        "Give the weather in Oslo, as JSON.",
        obj(
            {
                "celsius": {"type": "number", "minimum": -90, "maximum": 60},
                "humidity": PERCENT,
                "wind": {"type": "number", "minimum": -1, "maximum": 1},
            }
        ),
    ),
    "required_fields": (
        "Create a to-do item, as JSON.",
        obj(
            {
                "id": {"type": "integer", "minimum": 1, "maximum": 1000},
                "title": {"type": "string", "maxLength": 24},
                "done": {"type": "boolean"},
                "note": {"type": "string", "maxLength": 12},
            },
            required=["id", "title", "done"],
        ),
    ),
}


def request(name: str, max_tokens: int = 160) -> UnifiedRequest:
    prompt, schema = SCHEMAS[name]
    base = UnifiedRequest.new("smollm2").add_user_message(prompt).set_max_tokens(max_tokens)
    return base.set_output_schema(schema, name=name)


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    with LocalModel.load(default_model_path(), n_ctx=1024) as loaded:
        yield loaded


async def test_engine_grammar_five_schemas_twenty_seeds_all_valid() -> None:
    """100 turns: every answer parses and validates against its schema."""
    invalid: list[tuple[str, int, str]] = []
    turns = 0
    for seed in SEEDS:
        sampling = SamplingConfig(seed=seed)
        with LocalModel.load(default_model_path(), n_ctx=1024, sampling=sampling) as seeded:
            async with CucaClient(ProviderEndpoint.LOCAL, local_model=seeded) as client:
                for name, (_, schema) in SCHEMAS.items():
                    done = await client.generate(request(name))
                    turns += 1
                    try:
                        jsonschema.validate(json.loads(done.text), schema)
                    except (ValueError, jsonschema.ValidationError):
                        invalid.append((name, seed, done.text))
                    else:
                        assert done.parsed == json.loads(done.text)
                        assert done.errors == ()
    assert turns == 100
    assert invalid == []


async def test_engine_grammar_gemma3_five_schemas_all_valid() -> None:
    """The same grammars on Gemma 3 270M's 262,144-token vocabulary: every answer parses
    and validates (one seed per schema: its grammar steps are slower)."""
    invalid: list[tuple[str, str]] = []
    with load_model("gemma3", n_ctx=1024, sampling=SamplingConfig(seed=1)) as gemma:
        async with CucaClient(ProviderEndpoint.LOCAL, local_model=gemma) as client:
            for name, (_, schema) in SCHEMAS.items():
                done = await client.generate(request(name))
                try:
                    jsonschema.validate(json.loads(done.text), schema)
                except (ValueError, jsonschema.ValidationError):
                    invalid.append((name, done.text))
    assert invalid == []


async def test_engine_grammar_keeps_prefix_reuse_and_exact_usage(model: LocalModel) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        first = await client.generate(request("enums"))
        again = await client.generate(request("enums"))
    prompt = len(model.tokenize_prompt(request("enums")))
    assert first.response.usage is not None and again.response.usage is not None
    assert first.response.usage.prompt_tokens == again.response.usage.prompt_tokens == prompt
    assert again.response.prompt_cache_usage is not None
    assert again.response.prompt_cache_usage.read_tokens > 0  # the prompt came from the cache


async def test_engine_grammar_cut_by_max_tokens_is_an_error_item_with_the_raw_text(
    model: LocalModel,
) -> None:
    """Five tokens cannot hold the object: the turn ends at the limit, the usage counts
    exactly five, and the half-written JSON is kept in an OutputValidationError."""
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        done = await client.generate(request("required_fields", max_tokens=5))
    assert done.response.finish_reason == "length"
    assert done.response.usage is not None and done.response.usage.completion_tokens == 5
    [error] = done.errors
    assert isinstance(error, OutputValidationError)
    assert error.raw == done.text and done.text.startswith("{")
    assert done.parsed is None


async def test_engine_grammar_dropped_turn_leaves_the_model_usable(model: LocalModel) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        with trio.fail_after(30):
            async with client.generate_stream(request("nested_objects")) as stream:
                async for item in stream:
                    if isinstance(item, Text):
                        break
        done = await client.generate(request("enums"))
    jsonschema.validate(json.loads(done.text), SCHEMAS["enums"][1])


def test_engine_grammar_unusable_schema_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="cannot build a grammar"):
        gbnf_for(OutputSchema("bad", {"type": "no-such-type"}))


@pytest.mark.parametrize(
    "schema,expected",
    [
        ({"type": "integer", "minimum": 2, "maximum": 4}, '"2" | "3" | "4"'),
        ({"type": "integer", "minimum": 0}, None),  # no upper bound: left to validation
        ({"type": "integer", "minimum": 0, "maximum": MAX_ENUMERATED + 1}, None),
        ({"type": "number", "minimum": 0.5, "maximum": 2}, None),  # not integral
        ({"type": "number", "minimum": 0, "maximum": 1, "exclusiveMaximum": 1}, None),
    ],
)
def test_engine_grammar_bounds_rule(schema: dict[str, Any], expected: str | None) -> None:
    assert bounded_number_rule(schema) == expected


def test_engine_grammar_number_bounds_cover_exactly_the_range() -> None:
    """Every decimal the number rule for [-2, 1] admits is inside it, and the values at
    and near both bounds are admitted (checked by expanding the rule's alternatives)."""
    rule = bounded_number_rule({"type": "number", "minimum": -2, "maximum": 1})
    assert rule is not None
    heads = {part.split('"')[1]: part for part in rule.split(" | ")}
    assert set(heads) == {"0", "-1", "-0", "-2", "1"}
    digits = "[0-9]{1,15}"  # at most 15 decimals: a number always ends
    assert digits in heads["0"] and digits in heads["-1"] and digits in heads["-0"]
    assert '"0"{1,15}' in heads["-2"] and '"0"{1,15}' in heads["1"]  # the bounds as x.000
