"""Non-streamed turns (``UnifiedRequest.stream = False``) on every HTTP adapter.

Each case is a pair of transcripts of the same turn: the event stream under
``tests/transcripts/`` and the single JSON response the vendor documents for a
non-streaming call (``<name>.json``, checked here against the vendor SDK's own response
type). Both go over loopback through the whole pipeline; the blocks, usage and finish
reason must be equal.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic.types
import attrs
import openai.types.chat
import openai.types.responses
import pytest
import trio
from conformance.targets import BY_NAME, Target, normalized
from google.genai import types as genai_types
from support.transcripts import TRANSCRIPTS, transcript

from cuca import (
    CucaPlugin,
    JsonError,
    ProviderError,
    RateLimitError,
    RetryPolicy,
    ServerError,
    TokenUsage,
    merge_blocks,
)
from cuca.testing import Reply, open_replay_server

JSON = [("content-type", "application/json")]

# (conformance target, transcript, the SDK type of the non-streamed response)
PAIRS: list[tuple[str, str, Any]] = [
    ("openai", "openai/text", openai.types.chat.ChatCompletion),
    ("openai", "openai/parallel_tool_calls", openai.types.chat.ChatCompletion),
    ("vllm", "vllm/reasoning_tool_call", openai.types.chat.ChatCompletion),
    ("lm_studio", "lm_studio/reasoning", openai.types.chat.ChatCompletion),
    ("deepseek", "deepseek/reasoner", openai.types.chat.ChatCompletion),
    ("anthropic", "anthropic/thinking_two_tools", anthropic.types.Message),
    ("gemini", "gemini/thoughts_parallel_calls", genai_types.GenerateContentResponse),
    ("openai_responses", "openai_responses/text", openai.types.responses.Response),
    (
        "openai_responses",
        "openai_responses/reasoning_two_tools",
        openai.types.responses.Response,
    ),
    ("vllm_responses", "vllm_responses/reasoning_tool_call", openai.types.responses.Response),
    ("llama_cpp_completion", "llama_cpp/completion", None),  # no SDK: README's shape
    ("llama_cpp_responses", "llama_cpp_responses/text", None),  # recorded: llama-server's
]
ids = [f"{t}:{n}" for t, n, _ in PAIRS]
TYPED = [pair for pair in PAIRS if pair[2] is not None]


def whole(name: str) -> bytes:
    return (TRANSCRIPTS / f"{name}.json").read_bytes()


async def run(target: Target, reply: Reply, stream: bool) -> tuple[Any, Any]:
    request = target.request().set_stream(stream)
    async with open_replay_server(reply) as server:
        async with target.client(server.url, retry=RetryPolicy.never()) as client:
            done = await client.generate(request)
        [sent] = server.requests
    return done, sent


@pytest.mark.parametrize("target_name,name,sdk_type", TYPED, ids=[f"{t}:{n}" for t, n, _ in TYPED])
def test_non_streamed_response_validates_against_the_vendor_sdk_type(
    target_name: str, name: str, sdk_type: Any
) -> None:
    document = json.loads(whole(name))
    if target_name == "vllm_responses":
        # vLLM builds on an older SDK whose input_tokens_details has no
        # cache_write_tokens (the current SDK requires it)
        document["usage"]["input_tokens_details"]["cache_write_tokens"] = 0
    sdk_type.model_validate(document)


@pytest.mark.parametrize("target_name,name,sdk_type", PAIRS, ids=ids)
async def test_non_streamed_turn_equals_the_streamed_turn(
    target_name: str, name: str, sdk_type: Any
) -> None:
    target = BY_NAME[target_name]
    streamed, streamed_sent = await run(target, Reply(transcript(name)), stream=True)
    single, sent = await run(target, Reply(whole(name), headers=JSON), stream=False)
    assert normalized(list(single.blocks)) == normalized(list(merge_blocks(streamed.blocks)))
    assert single.errors == streamed.errors == ()
    # counted_usage (llama.cpp /completion) counts Text blocks, which a whole body has one
    # of; endpoint names each turn's own server (two servers, two URLs)
    assert attrs.evolve(single.response, counted_usage=None, endpoint=None) == attrs.evolve(
        streamed.response, counted_usage=None, endpoint=None
    )
    if streamed.response.counted_usage is not None:
        assert single.response.counted_usage == TokenUsage(0, 1)
        assert streamed.response.counted_usage.completion_tokens > 1
    body = sent.json()
    if target_name == "llama_cpp_completion":  # seed 002: "stream is always true"
        assert body["stream"] is True  # here the server ignored it and answered JSON
    else:
        assert body.get("stream") in (False, None)
    assert "stream_options" not in body
    assert "stream" not in sent.path and "alt=sse" not in sent.path
    assert streamed_sent.json().get("stream") in (True, None)


async def test_non_streamed_gemini_calls_generate_content() -> None:
    target = BY_NAME["gemini"]
    name = "gemini/thoughts_parallel_calls"
    _, sent = await run(target, Reply(whole(name), headers=JSON), stream=False)
    assert sent.path.endswith(":generateContent")


async def test_non_streamed_error_document_is_the_error_of_its_kind() -> None:
    """A 200 whose JSON body is ``{"error": ...}``: the user gets the vendor's message,
    in the class its kind has as a status (``server_error``: a ServerError)."""
    body = json.dumps({"error": {"message": "model overloaded", "type": "server_error"}})
    with pytest.raises(ServerError, match="model overloaded"):
        await run(BY_NAME["openai"], Reply(body.encode(), headers=JSON), stream=False)
    body = json.dumps({"error": {"message": "no such thing", "type": "unknown_kind"}})
    with pytest.raises(ProviderError, match="no such thing"):  # no known kind
        await run(BY_NAME["openai"], Reply(body.encode(), headers=JSON), stream=False)


async def test_non_streamed_truncated_json_is_a_json_error() -> None:
    """A body that stops mid-document (the server closed it early): a JsonError naming
    the provider, not a half-decoded turn."""
    body = whole("openai/parallel_tool_calls")
    reply = Reply(body[: len(body) // 2], headers=JSON)
    with pytest.raises(JsonError, match="openai sent a frame that is not JSON"):
        await run(BY_NAME["openai"], reply, stream=False)


class Recorder(CucaPlugin):
    """Sees what plugins see: each block, then the response."""

    def __init__(self) -> None:
        self.blocks: list[Any] = []
        self.responses: list[Any] = []

    async def on_stream_chunk(self, block: Any) -> Any:
        self.blocks.append(block)
        return block

    async def on_response_complete(self, response: Any) -> None:
        self.responses.append(response)


async def test_non_streamed_turn_runs_the_plugins_as_a_streamed_one() -> None:
    target = BY_NAME["anthropic"]
    seen = []
    replies = [
        Reply(transcript("anthropic/thinking_two_tools")),
        Reply(whole("anthropic/thinking_two_tools"), headers=JSON),
    ]
    async with open_replay_server(replies) as server:  # one server: one endpoint
        for stream in (True, False):
            recorder = Recorder()
            async with target.client(server.url, plugins=[recorder]) as client:
                await client.generate(target.request().set_stream(stream))
            seen.append((list(merge_blocks(recorder.blocks)), recorder.responses))
    assert seen[0] == seen[1]
    assert len(seen[1][1]) == 1


async def test_non_streamed_turn_dropped_while_waiting_closes_the_connection() -> None:
    """The server sends half the JSON and stalls: leaving the block ends the turn at
    once, connection included, as for a stream."""
    body = whole("openai/parallel_tool_calls")
    reply = Reply(body, headers=JSON, stall_after=len(body) // 2)
    target = BY_NAME["openai"]
    async with open_replay_server(reply) as server:
        async with target.client(server.url) as client:
            with trio.move_on_after(0.3) as scope:
                async with client.generate_stream(target.request().set_stream(False)) as s:
                    async for _ in s:
                        pass
            assert scope.cancelled_caught
            with trio.fail_after(30):  # a guard against a hang, not a measure
                await server.wait_connections_closed()


async def test_streamed_request_answered_with_json_is_decoded_whole() -> None:
    """A gateway that ignores ``stream: true`` and says ``application/json``: the turn
    is decoded as its non-streamed form, the same blocks as the stream would give."""
    done, _ = await run(BY_NAME["openai"], Reply(whole("openai/text"), headers=JSON), True)
    assert done.text == "I'm unable to provide real-time weather updates."


async def test_streamed_request_answered_with_unlabelled_json_says_so() -> None:
    """The same JSON labelled as an event stream: not an empty turn, a ProviderError
    telling the user to send the turn non-streamed."""
    sse = [("content-type", "text/event-stream")]
    with pytest.raises(ProviderError, match=r"use request.set_stream\(False\)"):
        await run(BY_NAME["openai"], Reply(whole("openai/text"), headers=sse), stream=True)


@pytest.mark.parametrize("target_name", ["openai", "anthropic", "gemini", "openai_responses"])
async def test_streamed_request_answered_with_a_json_error_shows_the_vendor_message(
    target_name: str,
) -> None:
    body = json.dumps({"error": {"message": "quota exhausted", "code": 429}}).encode()
    for headers in (JSON, [("content-type", "text/event-stream")]):
        with pytest.raises(RateLimitError, match="quota exhausted"):  # "code": 429
            await run(BY_NAME[target_name], Reply(body, headers=headers), stream=True)
