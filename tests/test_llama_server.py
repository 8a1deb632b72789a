"""Against a real ``llama-server`` on loopback, running SmolLM2 135M.

The server's own bytes are recorded by a pass-through httpx transport, so the usage
cuca reports is compared with what the server sent, not with guesses.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio
from support.corpus import TEMPLATES, template_corpus
from support.llama_server import LlamaServer, running_llama_server
from support.recording import RecordingTransport, server_frames

from cuca import (
    CucaClient,
    CucaError,
    HttpStatusError,
    ProviderEndpoint,
    ReadTimeout,
    RetryPolicy,
    StreamIncomplete,
    Text,
    Thinking,
    ThinkingEffort,
    ToolCall,
    UnifiedRequest,
    UnifiedResponse,
    merge_blocks,
)
from cuca.providers.base import Item
from cuca.providers.llamacpp.encode import LlamaCppConfig, LlamaRoute

# Qwen3's template, from the template corpus (fetched on first use, whatever ran before):
# SmolLM2 speaks the same ChatML, and llama-server knows the template's tool-call and
# <think> formats, so it parses both out of the model's output.
TOOL_TEMPLATE = "Qwen-Qwen3-0.6B.jinja"
SERVER_KEY = "llama-test-key-7c1e"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    with running_llama_server() as server:
        yield server


@pytest.fixture(scope="session")
def llama_tool_server() -> Iterator[LlamaServer]:
    """A second server with a tool- and reasoning-capable template, requiring an API key."""
    template_corpus()  # the templates are in TEMPLATES from here on
    template = str(TEMPLATES / TOOL_TEMPLATE)
    args = ["--jinja", "--chat-template-file", template, "--api-key", SERVER_KEY]
    with running_llama_server(args) as server:
        yield server


def llama_client(
    url: str, http: httpx.AsyncClient, config: LlamaCppConfig | None, key: str | None = None
) -> CucaClient:
    """A llama.cpp client on ``http`` (a recording transport's)."""
    return CucaClient(
        ProviderEndpoint.LLAMA_CPP,
        base_url=url,
        api_key=key,
        provider_config=config,
        http_client=http,
    )


async def turn(
    url: str,
    request: UnifiedRequest,
    config: LlamaCppConfig | None = None,
    key: str | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[list[Item], UnifiedResponse | None, bytes]:
    transport = RecordingTransport(extra)
    items: list[Item] = []
    async with httpx.AsyncClient(transport=transport, timeout=None) as http:
        client = llama_client(url, http, config, key)
        async with client, client.generate_stream(request) as stream:
            async for item in stream:
                items.append(item)
    return items, stream.response, bytes(transport.bodies[-1])


def prompt(text: str, max_tokens: int = 12) -> UnifiedRequest:
    return (
        UnifiedRequest.new("smollm2")
        .add_system_message("You are a helpful assistant.")
        .add_user_message(text)
        .set_max_tokens(max_tokens)
        .set_temperature(0.0)
    )


def text_of(items: list[Item]) -> str:
    return "".join(item.text for item in items if isinstance(item, Text))


async def test_llama_server_chat_streams_text_and_server_usage(llama_server: LlamaServer) -> None:
    items, response, body = await turn(llama_server.url, prompt("Name a colour."))
    frames = server_frames(body)
    sent_text = "".join(
        f["choices"][0]["delta"].get("content") or "" for f in frames if f.get("choices")
    )
    (usage,) = [f["usage"] for f in frames if f.get("usage")]
    assert items, "the model produced nothing"
    assert all(isinstance(item, Text) for item in items)
    assert text_of(items) == sent_text
    assert response is not None
    assert response.usage is not None
    assert response.usage.prompt_tokens == usage["prompt_tokens"]
    assert response.usage.completion_tokens == usage["completion_tokens"]
    assert 0 < response.usage.completion_tokens <= 12
    assert response.finish_reason in {"stop", "length"}


async def test_llama_server_chat_repeated_prompt_reports_cached_tokens(
    llama_server: LlamaServer,
) -> None:
    request = prompt("Repeat after me: the quick brown fox jumps over the lazy dog.", 4)
    await turn(llama_server.url, request)
    _, response, body = await turn(llama_server.url, request)
    (usage,) = [f["usage"] for f in server_frames(body) if f.get("usage")]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    assert response is not None
    assert response.prompt_cache_usage is not None
    assert response.prompt_cache_usage.read_tokens == cached


async def test_llama_server_chat_accepts_thinking_effort(llama_server: LlamaServer) -> None:
    request = prompt("Say hi.", 4).set_thinking(ThinkingEffort.LOW)
    items, response, _ = await turn(llama_server.url, request)
    assert all(isinstance(item, (Text, Thinking)) for item in items)
    assert response is not None and response.usage is not None


async def test_llama_server_reasoning_arrives_as_thinking(llama_tool_server: LlamaServer) -> None:
    """A grammar makes the model write a reasoning block; llama-server sends it as
    reasoning_content, and the user sees a Thinking block, then the answer's Text."""
    grammar = 'root ::= "<think>" "I will greet." "</think>" "Hi!"'
    request = prompt("Say hi.", 32).set_thinking(ThinkingEffort.LOW)
    config = LlamaCppConfig(api_key=SERVER_KEY)
    items, response, body = await turn(
        llama_tool_server.url, request, config, extra={"grammar": grammar}
    )
    sent = [f["choices"][0]["delta"] for f in server_frames(body) if f.get("choices")]
    assert "".join(d.get("reasoning_content") or "" for d in sent).strip() == "I will greet."
    blocks = merge_blocks([item for item in items if not isinstance(item, CucaError)])
    assert [type(block) for block in blocks] == [Thinking, Text]
    assert blocks[0].text.strip() == "I will greet."
    assert blocks[1].text.strip() == "Hi!"
    assert response is not None and response.usage is not None
    assert response.usage.completion_tokens > 0


@pytest.mark.parametrize("n_predict", [1, 5])
async def test_llama_server_completion_honours_n_predict(
    llama_server: LlamaServer, n_predict: int
) -> None:
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    items, response, body = await turn(
        llama_server.url, prompt("Count to twenty.", n_predict), config
    )
    frames = server_frames(body)
    final = frames[-1]
    assert final["stop"] is True
    # this llama-server sends the final frame empty: following seed 002 (its content is
    # text like any frame's) does not repeat the answer
    assert final["content"] == ""
    assert final["tokens_predicted"] <= n_predict
    assert items, "the model produced nothing"
    assert all(isinstance(item, Text) and item.text for item in items)
    assert len(items) <= n_predict
    assert text_of(items) == "".join(f.get("content", "") for f in frames)
    assert response is not None
    assert response.usage is None


async def test_llama_server_completion_non_streamed_request_streams(
    llama_server: LlamaServer,
) -> None:
    """Seed 002, completion route: "stream is always true". A ``set_stream(False)``
    request streams from the real server and is collected: the same text as streamed."""
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    request = prompt("Name a colour.", 6)
    transport = RecordingTransport()
    async with httpx.AsyncClient(transport=transport, timeout=None) as http:
        async with llama_client(llama_server.url, http, config) as client:
            single = await client.generate(request.set_stream(False))
            streamed = await client.generate(request)
    assert [len(server_frames(bytes(b))) > 1 for b in transport.bodies] == [True, True]
    assert single.text == streamed.text != ""


@pytest.mark.parametrize("path", ["/completion", "/v1/chat/completions"])
async def test_llama_server_closes_the_connection_after_a_stream_unannounced(
    llama_server: LlamaServer, path: str
) -> None:
    """What ``Dialect.closes_after_stream`` is for, pinned on the real server: asked to
    keep the connection, it ends a streamed answer with its last chunk and no
    ``Connection: close``, then closes the socket. (If a llama-server build stops
    doing so, this fails, and the header cuca sends on its streams can go.)"""
    host, port = llama_server.url.removeprefix("http://").split(":")
    body = json.dumps(
        {"prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
        | {"n_predict": 2, "max_tokens": 2}
    ).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: keep-alive\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(head.encode() + body)
        received = b""
        with trio.fail_after(60):
            while not received.endswith(b"\r\n0\r\n\r\n"):
                chunk = await stream.receive_some(65536)
                assert chunk, "closed before the last chunk"
                received += chunk
            after = await stream.receive_some(65536)
    response_head = received.partition(b"\r\n\r\n")[0].lower()
    assert response_head.startswith(b"http/1.1 200")
    assert b"transfer-encoding: chunked" in response_head
    assert b"connection: close" not in response_head
    assert after == b""  # closed by the server, the client having asked to keep it


async def test_llama_server_back_to_back_streamed_turns_on_one_client(
    llama_server: LlamaServer,
) -> None:
    """Ten streamed turns sent the moment the one before ends, on one client: every one
    is answered (each asked for the close the server makes anyway)."""
    transport = RecordingTransport()
    async with httpx.AsyncClient(transport=transport, timeout=None) as http:
        for route in (LlamaRoute.COMPLETION, LlamaRoute.CHAT):
            config = LlamaCppConfig(route=route)
            async with llama_client(llama_server.url, http, config) as client:
                for _ in range(5):
                    assert (await client.generate(prompt("Name a colour.", 2))).text
    assert len(transport.bodies) == 10
    assert transport.closes == [True] * 10


async def test_llama_server_completion_default_n_predict(llama_server: LlamaServer) -> None:
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    request = prompt("Tell me a long story about a dragon.").set_max_tokens(None)
    _, _, body = await turn(llama_server.url, request, config)
    final = server_frames(body)[-1]
    assert final["tokens_predicted"] <= 128
    assert final["generation_settings"]["n_predict"] == 128


WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def weather_questions(tools: bool) -> UnifiedRequest:
    """Three questions answered with a call each, then a fourth: a pattern the model
    follows (this llama-server ignores ``tool_choice: required`` and refuses a grammar
    beside tools, so the prompt is what makes the 135M model call the tool)."""
    request = UnifiedRequest.new("smollm2").set_max_tokens(48).set_temperature(0.0)
    if tools:
        request = request.add_tool("get_weather", "Get the current weather for a city", WEATHER)
    for n, city in enumerate(["London", "Rome", "Berlin"]):
        call = ToolCall(f"c{n}", "get_weather", {"city": city})
        request = request.add_user_message(f"Weather in {city}?").add_assistant_message([call])
    return request.add_user_message("Weather in Paris?")


async def test_llama_server_tool_call_is_a_tool_call(llama_tool_server: LlamaServer) -> None:
    """The model calls the declared tool; llama-server parses the call out of its output,
    and the user gets a ToolCall of that name whose arguments parsed."""
    config = LlamaCppConfig(api_key=SERVER_KEY)
    _, plain, _ = await turn(llama_tool_server.url, weather_questions(False), config)
    items, response, body = await turn(llama_tool_server.url, weather_questions(True), config)
    assert not [item for item in items if isinstance(item, CucaError)]
    calls = [item for item in items if isinstance(item, ToolCall)]
    assert [(call.name, call.arguments) for call in calls] == [("get_weather", {"city": "Paris"})]
    sent = [f["choices"][0]["delta"] for f in server_frames(body) if f.get("choices")]
    (server_id,) = {c["id"] for d in sent for c in d.get("tool_calls") or [] if c.get("id")}
    assert calls[0].id == server_id
    assert response is not None and response.usage is not None
    assert plain is not None and plain.usage is not None
    assert response.usage.prompt_tokens > plain.usage.prompt_tokens + 20  # tools rendered
    assert response.finish_reason == "tool_calls"


async def test_llama_server_api_key_required_and_sent(llama_tool_server: LlamaServer) -> None:
    with pytest.raises(HttpStatusError) as caught:
        await turn(llama_tool_server.url, prompt("Hi", 2))
    assert caught.value.status == 401
    items, _, _ = await turn(llama_tool_server.url, prompt("Hi", 2), key=SERVER_KEY)
    assert all(isinstance(item, Text) for item in items)


# -- faults injected into the real server ---------------------------------------------------

# an answer that cannot end before the fault: the end-of-sequence token is ignored
# (llama-server's ignore_eos), and 1,500 tokens on one thread take seconds however idle
# the machine is (the story of 200 tokens could end, on a busy machine, before the test
# had read its first block and stopped the server)
STORY = prompt("Tell me a long story about a dragon.", 1500)
ENDLESS = {"ignore_eos": True}


@pytest.fixture
def fault_server() -> Iterator[LlamaServer]:
    """A server of its own, for a test that stops or kills it."""
    with running_llama_server() as server:
        yield server
        if server.process.poll() is None:
            os.kill(server.process.pid, signal.SIGCONT)  # so that it can be stopped


def fault_client(http: httpx.AsyncClient, server: LlamaServer) -> CucaClient:
    """A client on ``http``, whose transport adds :data:`ENDLESS` and whose own timeouts
    apply (cuca refuses its own beside an ``http_client``)."""
    return CucaClient(
        ProviderEndpoint.LLAMA_CPP,
        base_url=server.url,
        http_client=http,
        retry=RetryPolicy.never(),
    )


async def test_llama_server_stopped_mid_stream_is_a_read_timeout(fault_server: LlamaServer) -> None:
    """The server freezes (SIGSTOP) mid-stream: with a 3 s read timeout the user gets the
    blocks sent before, then ReadTimeout; once the server resumes, the same client's
    next turn works.

    On a busy machine the server may be silent for 3 s before its first block: that
    turn's ReadTimeout is right too, but nothing was stopped, so the test asks again
    (the server was stopped mid-stream on the first try at load 0 and beside a hog).
    The next turn runs without a read timeout: its first block may take longer than 3 s
    there."""
    items: list[Item] = []
    stopped, tries = False, 0
    transport = RecordingTransport(ENDLESS)
    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(None, read=3)) as http:
        async with fault_client(http, fault_server) as client:
            with trio.fail_after(600):  # a guard against a hang, not a measure
                while not stopped:
                    items, tries = [], tries + 1
                    with pytest.raises(ReadTimeout):
                        async with client.generate_stream(STORY) as stream:
                            async for item in stream:
                                items.append(item)
                                if not stopped:
                                    os.kill(fault_server.process.pid, signal.SIGSTOP)
                                    stopped = True
            print(f"\nstopped mid-stream on try {tries}, after {len(items)} blocks")
            os.kill(fault_server.process.pid, signal.SIGCONT)
            http.timeout = httpx.Timeout(None)
            transport.extra = {}
            with trio.fail_after(120):  # a guard against a hang, not a measure
                done = await client.generate(prompt("Name a colour.", 8))
    assert items and all(isinstance(item, Text) for item in items)
    assert done.text
    assert done.response.usage is not None and done.response.usage.completion_tokens > 0


async def test_llama_server_killed_mid_stream_is_stream_incomplete(
    fault_server: LlamaServer,
) -> None:
    """The server dies (SIGKILL) mid-stream: the user gets the blocks sent before, then
    StreamIncomplete; a server restarted on the same port serves the same client's next
    turn."""
    items: list[Item] = []
    port = httpx.URL(fault_server.url).port
    transport = RecordingTransport(ENDLESS)
    async with (
        httpx.AsyncClient(transport=transport, timeout=None) as http,
        fault_client(http, fault_server) as client,
    ):
        with pytest.raises(StreamIncomplete):
            async with client.generate_stream(STORY) as stream:
                async for item in stream:
                    items.append(item)
                    if len(items) == 1:
                        fault_server.process.kill()
        fault_server.process.wait()
        with running_llama_server(port=port):
            done = await client.generate(prompt("Name a colour.", 8))
    assert items and all(isinstance(item, Text) for item in items)
    assert done.text
    assert done.response.usage is not None and done.response.usage.completion_tokens > 0
