"""Wrong input gets one clear, typed error; what seed 000 accepts reaches every encoder.

Each test states what the user sees: the exact ``str`` of the error, raised where the
mistake was made (the constructor, the client) rather than deep inside an encoder.
"""

from __future__ import annotations

import asyncio
import json
import math
from datetime import datetime
from typing import Any

import pytest
import trio
from conformance.targets import BY_NAME, TARGETS, Target, normalized
from support.fake_adapter import FAKE, frames
from support.transcripts import TRANSCRIPTS

from cuca import (
    Block,
    ConfigurationError,
    CucaClient,
    LlamaCppConfig,
    MessageRole,
    ProviderEndpoint,
    RateLimitError,
    RetryPolicy,
    Timeouts,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    UnifiedMessage,
    UnifiedRequest,
    from_json,
    to_json,
)
from cuca.engine.template import template_variables
from cuca.testing import Reply, open_replay_server
from cuca.types import CONTENT_FORMS as FORMS

WEATHER = {"city": "Paris"}


def whole(name: str) -> bytes:
    """The non-streamed JSON answer of a transcript's turn."""
    return (TRANSCRIPTS / f"{name}.json").read_bytes()


def history(arguments: Any) -> UnifiedRequest:
    """A conversation whose assistant turn called ``get_weather`` with ``arguments``."""
    return (
        UnifiedRequest.new("m")
        .add_user_message("Weather in Paris?")
        .add_assistant_message(ToolCall("call_1", "get_weather", arguments))
        .add_tool_result("call_1", "sunny", name="get_weather")
    )


def holds(value: Any, wanted: dict[str, Any]) -> bool:
    """Whether ``value`` holds ``wanted`` somewhere, as an object or as JSON text."""
    if value == wanted:
        return True
    if isinstance(value, str):
        try:
            return bool(json.loads(value) == wanted)
        except ValueError:
            return False
    children = value.values() if isinstance(value, dict) else value
    return isinstance(value, dict | list) and any(holds(v, wanted) for v in children)


WITH_TOOLS = [t for t in TARGETS if t.tool_frames is not None]  # not llama.cpp /completion


# -- 1. ToolCall arguments, as seed 000 takes them, in every encoder -------------------


@pytest.mark.parametrize("arguments", [WEATHER, json.dumps(WEATHER), '  {"city": "Paris"} '])
@pytest.mark.parametrize("target", WITH_TOOLS, ids=[t.name for t in WITH_TOOLS])
def test_inputs_every_encoder_takes_arguments_as_an_object_or_a_json_string(
    target: Target, arguments: Any
) -> None:
    wire = target.adapter().encode(history(arguments))
    assert holds(json.loads(wire.body_bytes()), WEATHER)


@pytest.mark.parametrize("target", WITH_TOOLS, ids=[t.name for t in WITH_TOOLS])
def test_inputs_every_encoder_takes_null_arguments_as_an_empty_object(target: Target) -> None:
    body = json.loads(target.adapter().encode(history(None)).body_bytes())
    assert holds(body, {})


def test_inputs_completion_route_drops_tool_blocks_as_its_page_says() -> None:
    completion = next(t for t in TARGETS if t.name == "llama_cpp_completion")
    body = json.loads(completion.adapter().encode(history(json.dumps(WEATHER))).body_bytes())
    assert "get_weather" not in body["prompt"] and "Weather in Paris?" in body["prompt"]


@pytest.mark.parametrize("arguments", [WEATHER, json.dumps(WEATHER), None])
def test_inputs_local_render_takes_arguments_as_seed_000(arguments: Any) -> None:
    message = template_variables(history(arguments))["messages"][1]
    assert message["tool_calls"][0]["function"]["arguments"] == (WEATHER if arguments else {})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("[1, 2]", "ToolCall.arguments is a string that holds no JSON object: '[1, 2]' (str)"),
        ("", "ToolCall.arguments is a string that holds no JSON object: '' (str)"),
        ("  \n", "ToolCall.arguments is a string that holds no JSON object: '  \\n' (str)"),
        ("null", "ToolCall.arguments is a string that holds no JSON object: 'null' (str)"),
        ("{'city'", "ToolCall.arguments is a string that is not JSON: \"{'city'\" (str)"),
        (
            [1, 2],
            "ToolCall.arguments must be a JSON object (a dict), None, or a string holding a "
            "JSON object, not [1, 2] (list)",
        ),
        (
            3.5,
            "ToolCall.arguments must be a JSON object (a dict), None, or a string holding a "
            "JSON object, not 3.5 (float)",
        ),
    ],
)
def test_inputs_tool_call_refuses_arguments_that_are_no_object(
    arguments: Any, message: str
) -> None:
    """Seed 000: "An object, null or a string holding an object is accepted; anything
    else fails the request": the empty and the blank string hold no object."""
    with pytest.raises(ConfigurationError) as info:
        ToolCall("call_1", "get_weather", arguments)
    assert str(info.value) == "configuration error: " + message


NOT_JSON = {"when": datetime(2026, 1, 1)}
NOT_JSON_MESSAGE = (
    "configuration error: tool call 'call_1' (get_weather) arguments are not JSON: "
    "Object of type datetime is not JSON serializable"
)


@pytest.mark.parametrize("target", WITH_TOOLS, ids=[t.name for t in WITH_TOOLS])
def test_inputs_every_encoder_refuses_arguments_json_cannot_hold(target: Target) -> None:
    with pytest.raises(ConfigurationError) as info:
        target.adapter().encode(history(NOT_JSON))
    assert str(info.value) == NOT_JSON_MESSAGE


def test_inputs_local_render_refuses_arguments_json_cannot_hold() -> None:
    with pytest.raises(ConfigurationError) as info:
        template_variables(history(NOT_JSON))
    assert str(info.value) == NOT_JSON_MESSAGE


async def test_inputs_a_refused_history_is_raised_from_the_turn_and_nothing_is_sent() -> None:
    openai = next(t for t in TARGETS if t.name == "openai")
    async with open_replay_server(Reply(b"")) as server, openai.client(server.url) as client:
        with pytest.raises(ConfigurationError, match="arguments are not JSON"):
            await client.generate(history({"tags": {"a", "b"}}))
    assert server.requests == []


# -- 1. the JSON form, the client, the event loop ---------------------------------------


def test_inputs_to_json_writes_a_call_built_from_a_string() -> None:
    line = to_json(ToolCall("call_1", "get_weather", '{"city": "Paris"}'))
    assert from_json(line, Block) == ToolCall("call_1", "get_weather", WEATHER)


@pytest.mark.parametrize(
    ("text", "cls", "message"),
    [
        ("{", Block, "from_json was given text that is not JSON: Expecting property name"),
        ("[]", Block, "cannot read a Block from [] (list): a block is"),
        (
            '{"type": "ToolCall", "value": {"id": 1, "name": "f"}}',
            Block,
            "cannot read a Block from {'type': 'ToolCall', 'value': {'id': 1, 'name': 'f'}} "
            "(dict): expected str, got 1 (int)",
        ),
        (
            '{"model": "m", "max_tokens": "10"}',
            UnifiedRequest,
            "cannot read a UnifiedRequest from {'model': 'm', 'max_tokens': '10'} (dict): "
            "expected int, got '10' (str)",
        ),
        (
            '{"model": "m", "stream": "false"}',
            UnifiedRequest,
            "cannot read a UnifiedRequest from {'model': 'm', 'stream': 'false'} (dict): "
            "expected bool, got 'false' (str)",
        ),
        ('{"model": "m"', UnifiedRequest, "from_json was given text that is not JSON"),
    ],
)
def test_inputs_from_json_refuses_bad_input_with_one_error(
    text: str, cls: Any, message: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        from_json(text, cls)
    assert str(info.value).startswith("configuration error: " + message)


def test_inputs_client_refuses_a_provider_given_as_a_string() -> None:
    with pytest.raises(ConfigurationError) as info:
        CucaClient("openai")  # type: ignore[arg-type]
    assert str(info.value) == (
        "configuration error: provider must be a ProviderEndpoint, not 'openai' (str): "
        "write ProviderEndpoint.OPENAI, or ProviderEndpoint.parse('openai')"
    )


def test_inputs_a_turn_under_asyncio_says_to_use_trio() -> None:
    async def main() -> None:
        request = UnifiedRequest.new("m").add_user_message("hi")
        async with CucaClient(FAKE, base_url="http://127.0.0.1:9") as client:
            async with client.generate_stream(request):
                pass  # pragma: no cover

    with pytest.raises(ConfigurationError) as info:
        asyncio.run(main())
    assert str(info.value) == (
        "configuration error: cuca runs under trio, not asyncio: start the program with "
        "trio.run(main), or call cuca from asyncio through trio-asyncio "
        "(trio_asyncio.open_loop() and trio_as_aio)"
    )


async def test_inputs_a_turn_takes_a_request_object() -> None:
    async with CucaClient(FAKE, base_url="http://127.0.0.1:9") as client:
        with pytest.raises(ConfigurationError, match=r"not 'hi' \(str\)"):
            await client.generate("hi")  # type: ignore[arg-type]


# -- 2. request values are checked at construction --------------------------------------

REQUEST = UnifiedRequest.new("m").add_user_message("hi")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: REQUEST.set_max_tokens("10"),
            "UnifiedRequest.max_tokens must be a positive integer, not '10' (str)",
        ),
        (
            lambda: REQUEST.set_max_tokens(0),
            "UnifiedRequest.max_tokens must be a positive integer, not 0 (int)",
        ),
        (
            lambda: REQUEST.set_max_tokens(True),
            "UnifiedRequest.max_tokens must be a positive integer, not True (bool)",
        ),
        (
            lambda: REQUEST.set_temperature(-1),
            "UnifiedRequest.temperature must be a number from 0 to 2, not -1 (int)",
        ),
        (
            lambda: REQUEST.set_temperature(5),
            "UnifiedRequest.temperature must be a number from 0 to 2, not 5 (int)",
        ),
        (
            lambda: REQUEST.set_temperature(math.nan),
            "UnifiedRequest.temperature must be a number from 0 to 2, not nan (float)",
        ),
        (
            lambda: REQUEST.set_temperature("0.5"),
            "UnifiedRequest.temperature must be a number from 0 to 2, not '0.5' (str)",
        ),
        (
            lambda: REQUEST.set_thinking("high"),
            "UnifiedRequest.thinking must be a ThinkingConfig, not 'high' (str)",
        ),
        (
            lambda: REQUEST.add_user_message(42),
            f"message content is {FORMS}, not 42 (int)",
        ),
        (
            lambda: REQUEST.add_user_message({"type": "text", "text": "hi"}),
            f"message content is {FORMS}, not {{'type': 'text', 'text': 'hi'}} (dict): a "
            "vendor-shaped part is not read, write its text as a string or Text(...)",
        ),
        (
            lambda: REQUEST.add_user_message(b"hi"),
            f"message content is {FORMS}, not b'hi' (bytes): decode bytes to a string first",
        ),
        (
            lambda: REQUEST.add_system_message(bytearray(b"hi")),
            f"message content is {FORMS}, not bytearray(b'hi') (bytearray): decode bytes to a "
            "string first",
        ),
        (
            lambda: UnifiedMessage(MessageRole.USER, {"hi"}),
            f"message content is {FORMS}, not {{'hi'}} (set)",
        ),
        (
            lambda: REQUEST.set_stop(["END", ""]),
            "UnifiedRequest.stop holds an empty string, which stops nothing",
        ),
        (
            lambda: REQUEST.set_stop([1]),
            "UnifiedRequest.stop holds str items, not 1 (int)",
        ),
        (
            lambda: REQUEST.set_stop({"END": 1}),
            "UnifiedRequest.stop must be a string or a list of strings, not {'END': 1} (dict)",
        ),
        (
            lambda: REQUEST.set_seed(-1),
            "UnifiedRequest.seed must be an integer from 0 to 2147483647, not -1 (int)",
        ),
        (
            lambda: REQUEST.set_seed(2**31),
            "UnifiedRequest.seed must be an integer from 0 to 2147483647, not 2147483648 (int)",
        ),
        (
            lambda: REQUEST.set_seed("7"),
            "UnifiedRequest.seed must be an integer from 0 to 2147483647, not '7' (str)",
        ),
        (
            lambda: REQUEST.set_top_p(1.5),
            "UnifiedRequest.top_p must be a number from 0 to 1, not 1.5 (float)",
        ),
        (
            lambda: REQUEST.set_tool_choice("any"),
            "UnifiedRequest.tool_choice must be 'auto', 'none', 'required' or "
            "ToolChoice.tool(name), not 'any' (str)",
        ),
        (
            lambda: ToolChoice(ToolChoiceMode.TOOL),
            "ToolChoice.name must name the tool to call, not None (NoneType)",
        ),
        (
            lambda: ToolChoice(ToolChoiceMode.AUTO, "get_weather"),
            "ToolChoice.name is for mode TOOL only, not 'auto'",
        ),
        (
            lambda: REQUEST.add_user_message([{"type": "text", "text": "hi"}]),
            "a message holds blocks (Text, ImageBase64, Thinking, ToolCall, ToolResult) or "
            "strings, not {'type': 'text', 'text': 'hi'} (dict)",
        ),
        (
            lambda: REQUEST.add_tool_result("call_1", {"temp": 21}),
            "ToolResult.output must be a string, not {'temp': 21} (dict)",
        ),
        (
            lambda: UnifiedMessage("user", "hi"),
            "UnifiedMessage.role must be a MessageRole, not 'user' (str)",
        ),
        (
            lambda: UnifiedRequest("m", messages=["hi"]),
            "UnifiedRequest.messages holds UnifiedMessage items, not 'hi' (str)",
        ),
        (
            lambda: Timeouts(-1),
            "Timeouts.connect must be a number of seconds above 0, not -1 (int)",
        ),
        (
            lambda: CucaClient(FAKE, timeout=0),
            "Timeouts.connect must be a number of seconds above 0, not 0 (int)",
        ),
        (
            lambda: RetryPolicy(jitter=2),
            "RetryPolicy.jitter must be a number from 0 to 1, not 2 (int)",
        ),
    ],
)
def test_inputs_wrong_request_values_are_refused_where_they_are_given(
    build: Any, message: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        build()
    assert str(info.value) == "configuration error: " + message


def test_inputs_right_request_values_pass() -> None:
    request = REQUEST.set_max_tokens(1).set_temperature(0).set_temperature(2.0)
    assert (request.max_tokens, request.temperature) == (1, 2.0)
    request = request.set_stop("END").set_seed(0).set_top_p(0).set_tool_choice("none")
    assert (request.stop, request.seed, request.top_p) == (("END",), 0, 0)
    assert request.tool_choice == ToolChoice.NONE
    request = request.set_stop(("a", "b", "a")).set_seed(2**31 - 1).set_top_p(1)
    assert (request.stop, request.seed, request.top_p) == (("a", "b"), 2**31 - 1, 1)
    assert request.set_stop(None).stop == () == request.set_stop([]).stop
    assert request.set_tool_choice(ToolChoice.tool("f")).tool_choice == ToolChoice.tool("f")
    assert UnifiedRequest.new("m").add_user_message(t for t in ["a"]).messages[0].text() == "a"
    assert Timeouts(0.5, total=30).total == 30
    assert UnifiedRequest.new("m").add_user_message(["a", "b"]).messages[0].text() == "a\nb"


def test_inputs_anthropic_refuses_a_temperature_above_one() -> None:
    anthropic = next(t for t in TARGETS if t.name == "anthropic")
    with pytest.raises(ConfigurationError) as info:
        anthropic.adapter().encode(REQUEST.set_temperature(1.5))
    assert str(info.value) == (
        "configuration error: temperature 1.5 is above 1, the most the Messages API takes"
    )
    openai = next(t for t in TARGETS if t.name == "openai")
    assert (
        json.loads(openai.adapter().encode(REQUEST.set_temperature(1.5)).body_bytes())[
            "temperature"
        ]
        == 1.5
    )


# -- 8. smaller ---------------------------------------------------------------------------


async def test_inputs_retry_after_beyond_the_limit_raises_at_once(autojump_clock: object) -> None:
    """A server that asks for an hour is not retried after 0.5 s: its 429 is raised."""
    hour = Reply(b'{"error":"slow down"}', status=429, headers=[("retry-after", "3600")])
    async with open_replay_server([hour, Reply(frames("ok"))]) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            start = trio.current_time()
            with pytest.raises(RateLimitError) as info:
                await client.generate(REQUEST)
            assert trio.current_time() - start == 0
    assert (info.value.status, info.value.retry_after) == (429, 3600)
    assert str(info.value) == 'http status 429: fake says: {"error":"slow down"}'
    assert len(server.requests) == 1


def test_inputs_message_role_reads_as_its_name() -> None:
    assert str(MessageRole.USER) == "user"
    assert f"{MessageRole.TOOL}" == "tool"


@pytest.mark.parametrize("base_url", ["localhost:8080/v1", "127.0.0.1:8080", "ftp://host/v1"])
def test_inputs_a_base_url_without_http_scheme_is_refused(base_url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        CucaClient(ProviderEndpoint.OPENAI, base_url=base_url, api_key="sk-x")
    assert str(info.value) == (
        f"configuration error: base_url {base_url!r} has no http:// or https:// scheme"
    )


async def test_inputs_a_config_base_url_without_scheme_is_a_configuration_error() -> None:
    config = LlamaCppConfig(base_url="127.0.0.1:8080")
    async with CucaClient(ProviderEndpoint.LLAMA_CPP, provider_config=config) as client:
        with pytest.raises(ConfigurationError) as info:
            await client.generate(REQUEST)
    assert str(info.value) == (
        "configuration error: invalid URL 127.0.0.1:8080/v1/chat/completions: "
        "no http:// or https:// scheme"
    )


NON_STREAMED = [
    ("openai", "openai/text"),
    ("anthropic", "anthropic/thinking_two_tools"),
    ("gemini", "gemini/thoughts_parallel_calls"),
    ("openai_responses", "openai_responses/text"),
    ("llama_cpp_completion", "llama_cpp/completion"),
]


@pytest.mark.parametrize(("target_name", "name"), NON_STREAMED)
async def test_inputs_a_json_answer_to_a_streamed_request_is_decoded_whole(
    target_name: str, name: str
) -> None:
    """A server that ignores ``stream: true`` and answers one JSON document: the user gets
    the turn's blocks (as from the event stream), not a "stream ended" error."""
    target = BY_NAME[target_name]
    json_reply = Reply(whole(name), headers=[("content-type", "application/json")])
    results = []
    for reply in (Reply(target.transcript(name)), json_reply):
        async with open_replay_server(reply) as server, target.client(server.url) as client:
            done = await client.generate(target.request())  # stream=True
        results.append((normalized(list(done.blocks)), done.response.usage))
    assert results[0] == results[1]
    assert results[1][0]  # the answer really has blocks
