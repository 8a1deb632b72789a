"""Structured output: one request field, encoded for every backend; the answer parsed
and validated into ``Completion.parsed``, or an error item carrying the raw text."""

from __future__ import annotations

import enum
import json
from typing import Any, Literal

import attrs
import pydantic
import pytest

from cuca import (
    AnthropicConfig,
    ConfigurationError,
    CucaClient,
    LlamaCppConfig,
    LlamaRoute,
    OpenAiApi,
    OpenAiConfig,
    OutputSchema,
    OutputValidationError,
    ProviderEndpoint,
    UnifiedRequest,
    from_json,
    to_json,
)
from cuca.providers.base import ClientSettings
from cuca.providers.registry import adapter_for
from cuca.schema import json_schema_of, parse_output
from cuca.testing import Reply, open_replay_server

KEY = "sk-test-0123456789"


class Unit(enum.Enum):
    C = "c"
    F = "f"


@attrs.frozen
class Place:
    city: str
    country: str


@attrs.frozen
class Forecast:
    place: Place
    temperature: float = attrs.field(metadata={"json_schema": {"minimum": -90, "maximum": 60}})
    unit: Unit
    tags: list[str]
    wind: Literal["calm", "breeze", "storm"]
    note: str | None = None


FORECAST = {
    "place": {"city": "Paris", "country": "FR"},
    "temperature": 18.5,
    "unit": "c",
    "tags": ["sunny"],
    "wind": "calm",
    "note": None,
}


def test_structured_schema_of_an_attrs_class_is_strict_and_nested() -> None:
    place = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    assert json_schema_of(Forecast) == {
        "type": "object",
        "properties": {
            "place": place,
            "temperature": {"type": "number", "minimum": -90, "maximum": 60},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "wind": {"type": "string", "enum": ["calm", "breeze", "storm"]},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["place", "temperature", "unit", "tags", "wind", "note"],
        "additionalProperties": False,
    }


def test_structured_set_output_schema_names_and_keeps_the_class() -> None:
    request = UnifiedRequest.new("m").set_output_schema(Forecast)
    assert request.output_schema == OutputSchema("Forecast", json_schema_of(Forecast))
    assert request.output_schema is not None and request.output_schema.target is Forecast
    raw = UnifiedRequest.new("m").set_output_schema({"type": "object"}, name="thing")
    assert raw.output_schema == OutputSchema("thing", {"type": "object"})
    assert raw.set_output_schema(None).output_schema is None


@attrs.frozen
class Loop:
    next: Loop | None


def test_structured_bad_schema_sources_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="refers to itself"):
        UnifiedRequest.new("m").set_output_schema(Loop)
    with pytest.raises(ConfigurationError, match="neither an attrs class nor a pydantic"):
        UnifiedRequest.new("m").set_output_schema(int)
    with pytest.raises(ConfigurationError, match="not list"):
        UnifiedRequest.new("m").set_output_schema([1])  # type: ignore[arg-type]


def test_structured_parse_structures_into_the_class() -> None:
    spec = OutputSchema("Forecast", json_schema_of(Forecast), Forecast)
    parsed = parse_output(spec, json.dumps(FORECAST))
    assert parsed == Forecast(Place("Paris", "FR"), 18.5, Unit.C, ["sunny"], "calm", None)


@pytest.mark.parametrize(
    "text,where",
    [
        ('{"place": ', "not JSON"),
        (json.dumps({**FORECAST, "temperature": 99}), "at temperature: 99 is greater than"),
        (json.dumps({**FORECAST, "wind": "gale"}), "at wind: 'gale' is not one of"),
        (json.dumps({k: v for k, v in FORECAST.items() if k != "tags"}), "'tags' is a required"),
    ],
)
def test_structured_invalid_answers_raise_with_the_raw_text(text: str, where: str) -> None:
    spec = OutputSchema("Forecast", json_schema_of(Forecast), Forecast)
    with pytest.raises(OutputValidationError, match=where) as info:
        parse_output(spec, text)
    assert info.value.raw == text
    assert str(info.value).startswith("output validation error: ")


class Reading(pydantic.BaseModel):
    city: str
    celsius: float


def test_structured_pydantic_models_give_their_own_schema_and_parse() -> None:
    request = UnifiedRequest.new("m").set_output_schema(Reading)
    assert request.output_schema is not None
    assert request.output_schema.schema == Reading.model_json_schema()
    parsed = parse_output(request.output_schema, '{"city": "Oslo", "celsius": -3}')
    assert parsed == Reading(city="Oslo", celsius=-3)


# -- encoding per backend -------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}
REQUEST = UnifiedRequest.new("m").add_user_message("Pick a number.")
REQUEST = REQUEST.set_output_schema(SCHEMA, name="number")
CHAT_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "number", "schema": SCHEMA, "strict": True},
}


def body(endpoint: ProviderEndpoint, config: Any = None, base_url: str | None = None) -> Any:
    settings = ClientSettings(endpoint, base_url, KEY, config)
    return adapter_for(settings).encode(REQUEST).body


@pytest.mark.parametrize(
    "endpoint",
    [
        ProviderEndpoint.OPENAI,
        ProviderEndpoint.VLLM,
        ProviderEndpoint.LM_STUDIO,
        ProviderEndpoint.LLAMA_CPP,
    ],
)
def test_structured_chat_route_sends_response_format_json_schema(
    endpoint: ProviderEndpoint,
) -> None:
    assert body(endpoint)["response_format"] == CHAT_FORMAT


def test_structured_responses_route_sends_text_format() -> None:
    sent = body(ProviderEndpoint.OPENAI, OpenAiConfig(api=OpenAiApi.RESPONSES))
    assert sent["text"] == {
        "format": {"type": "json_schema", "name": "number", "schema": SCHEMA, "strict": True}
    }


def test_structured_llama_completion_route_sends_json_schema() -> None:
    sent = body(ProviderEndpoint.LLAMA_CPP, LlamaCppConfig(route=LlamaRoute.COMPLETION))
    assert sent["json_schema"] == SCHEMA


def test_structured_anthropic_sends_output_config_format() -> None:
    sent = body(ProviderEndpoint.ANTHROPIC, AnthropicConfig())
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}


def test_structured_gemini_sends_json_mime_type_and_schema() -> None:
    config = body(ProviderEndpoint.GOOGLE_GEMINI)["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == SCHEMA


def test_structured_deepseek_uses_json_mode_with_the_schema_in_a_system_message() -> None:
    """DeepSeek has JSON mode only: the schema rides in a system message after the
    user's own system prompt (weaker: the server does not enforce it)."""
    request = UnifiedRequest.new("m").add_system_message("Be brief.").add_user_message("Pick.")
    request = request.set_output_schema(SCHEMA, name="number")
    wire = adapter_for(ClientSettings(ProviderEndpoint.DEEPSEEK, None, KEY)).encode(request)
    assert wire.body["response_format"] == {"type": "json_object"}
    messages = wire.body["messages"]
    assert [m["role"] for m in messages] == ["system", "system", "user"]
    assert messages[0]["content"] == "Be brief."
    assert json.dumps(SCHEMA) in messages[1]["content"]
    assert "named number" in messages[1]["content"]


async def test_structured_deepseek_bridge_refuses_before_any_byte_is_sent() -> None:
    """What the user sees: a ConfigurationError naming the backend; the server got nothing."""
    async with open_replay_server(Reply(b"")) as server:
        async with CucaClient(
            ProviderEndpoint.DEEPSEEK, base_url=f"{server.url}/anthropic", api_key=KEY
        ) as client:
            with pytest.raises(ConfigurationError, match="cannot constrain its answer"):
                await client.generate(REQUEST)
        assert server.requests == []


# -- Completion.parsed over HTTP ------------------------------------------------------------


def chat_text(*pieces: str) -> bytes:
    """A ``/chat/completions`` stream whose answer is ``pieces`` (deltas), then usage."""
    frames = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    frames.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    frames.append({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 7}})
    out = b"".join(f"data: {json.dumps(f)}\n\n".encode() for f in frames)
    return out + b"data: [DONE]\n\n"


async def generate(reply: bytes, request: UnifiedRequest) -> Any:
    async with open_replay_server(Reply(reply)) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=f"{server.url}/v1", api_key=KEY
        ) as client:
            return await client.generate(request)


async def test_structured_generate_gives_the_parsed_instance() -> None:
    text = json.dumps(FORECAST)
    request = UnifiedRequest.new("m").add_user_message("Forecast?").set_output_schema(Forecast)
    done = await generate(chat_text(text[:10], text[10:31], text[31:]), request)
    assert done.parsed == Forecast(Place("Paris", "FR"), 18.5, Unit.C, ["sunny"], "calm")
    assert done.errors == ()
    assert done.text == text


async def test_structured_generate_with_an_invalid_answer_gives_an_error_item() -> None:
    """The answer breaks the schema: ``parsed`` is None, and the error item says where
    and carries the whole raw text (nothing lost)."""
    text = '{"n": "seven"}'
    done = await generate(chat_text('{"n": ', '"seven"}'), REQUEST)
    assert done.parsed is None
    [error] = done.errors
    assert isinstance(error, OutputValidationError)
    assert error.raw == text
    assert "at n: 'seven' is not of type 'integer'" in str(error)


async def test_structured_generate_without_a_schema_parses_nothing() -> None:
    done = await generate(chat_text('{"n": 1}'), UnifiedRequest.new("m").add_user_message("x"))
    assert (done.parsed, done.errors) == (None, ())


def test_structured_llama_cpp_responses_route_refuses_the_schema() -> None:
    """llama-server's /v1/responses ignores ``text.format`` (it answered a schema request
    with prose in our real-server probe): refused before any byte, naming the route."""
    with pytest.raises(ConfigurationError, match="llama_cpp's /v1/responses route cannot"):
        body(ProviderEndpoint.LLAMA_CPP, OpenAiConfig(api=OpenAiApi.RESPONSES))


def test_structured_request_round_trips_through_json_without_its_class() -> None:
    """A request with a schema from a class saves as JSON (a session log does): the
    name, schema and strictness come back; the class, which JSON cannot hold, does not."""
    request = UnifiedRequest.new("m").add_user_message("x").set_output_schema(Forecast)
    back = from_json(to_json(request), UnifiedRequest)
    assert back == request  # OutputSchema compares without its target
    assert back.output_schema is not None and back.output_schema.target is None
    assert back.output_schema.schema == json_schema_of(Forecast)
