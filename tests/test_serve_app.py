"""The server (``cuca.serve``) under hypercorn's trio worker on loopback, with a scripted
backend: its routes, keys, limits, errors in each wire's envelope, secrets never sent
back, a client's hang-up cancelling the turn before the first byte and mid-stream, and
the status the log gives each request."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import pytest
import trio
from support.serve_backends import ScriptedBackend

from cuca.errors import AuthenticationError, HttpStatusError, ServerError
from cuca.serve import Backend, KeyLimits, Limits, ServeApp, serve
from cuca.types import MessageRole, Text, Thinking, TokenUsage, ToolCall

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}
WAIT = 30  # seconds: a hang fails the test, no verdict depends on it


@asynccontextmanager
async def served(app: ServeApp) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, app, "127.0.0.1", 0)
        yield url
        nursery.cancel_scope.cancel()


def app_for(backend: ScriptedBackend, **options: Any) -> ServeApp:
    return ServeApp({"m": Backend(backend)}, **options)


class RequestLog(logging.Handler):
    """The lines the operator reads: the server's one line per request (method, path,
    status), as they are written."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._written = trio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "cuca.serve":  # not hypercorn's own logger beneath it
            self.lines.append(record.getMessage())
            self._written.set()

    async def line(self, index: int) -> str:
        """The ``index``-th line, once the server has written it."""
        while len(self.lines) <= index:
            self._written = trio.Event()
            await self._written.wait()
        return self.lines[index]


@contextmanager
def request_log() -> Iterator[RequestLog]:
    logger = logging.getLogger("cuca.serve")
    handler, level = RequestLog(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def raw_post(url: str, body: dict[str, Any]) -> trio.SocketStream:
    """A connection with ``body`` posted to the chat route over it, written by hand (so
    that the test decides when it closes)."""
    port = int(url.rsplit(":", 1)[1])
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
        f"\r\ncontent-length: {len(data)}\r\n\r\n"
    ).encode()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(head + data)
    return stream


def frames(body: bytes) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for frame in body.decode().split("\n\n"):
        if not frame:
            continue
        name = None
        for line in frame.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
                out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out


async def test_serve_health_and_models_answer_each_wire() -> None:
    async with served(app_for(ScriptedBackend([]))) as url, httpx.AsyncClient() as http:
        assert (await http.get(f"{url}/health")).json() == {"status": "ok"}
        openai = (await http.get(f"{url}/v1/models")).json()
        assert openai["object"] == "list" and openai["data"][0]["id"] == "m"
        anthropic = await http.get(f"{url}/v1/models", headers={"anthropic-version": "2023-06-01"})
        assert anthropic.json()["data"][0] == {
            "type": "model",
            "id": "m",
            "display_name": "m",
            "created_at": "1970-01-01T00:00:00Z",
        }


async def test_serve_streams_a_chat_turn_with_usage_when_asked() -> None:
    backend = ScriptedBackend([[Thinking("hm")], [Text("hel"), Text("lo")]])
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    async with served(app_for(backend)) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/v1/chat/completions", json=body)
    assert answer.headers["content-type"] == "text/event-stream"
    chunks = frames(answer.content)
    assert chunks[-1] == (None, "[DONE]")
    assert chunks[-2][1]["usage"]["total_tokens"] == 10
    assert chunks[-3][1]["choices"][0]["finish_reason"] == "stop"
    assert backend.requests[0].messages[0].content == (Text("hi"),)


async def test_serve_requires_a_key_and_takes_bearer_or_x_api_key() -> None:
    app = app_for(ScriptedBackend([[Text("ok")]]), api_keys=["k1", "k2"])
    async with served(app) as url, httpx.AsyncClient() as http:
        refused = await http.post(f"{url}/v1/chat/completions", json=CHAT)
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "authentication_error"
        wrong = await http.post(f"{url}/v1/messages", json=MESSAGES, headers={"x-api-key": "k3"})
        assert wrong.status_code == 401 and wrong.json()["type"] == "error"
        bearer = {"authorization": "Bearer k2"}
        assert (await http.post(f"{url}/v1/chat/completions", json=CHAT, headers=bearer)).is_success
        keyed = {"x-api-key": "k1", "anthropic-version": "2023-06-01"}
        beta = f"{url}/v1/messages?beta=true"
        assert (await http.post(beta, json=MESSAGES, headers=keyed)).is_success
        assert (await http.get(f"{url}/health")).is_success  # health needs no key


@pytest.mark.parametrize(
    ("path", "content", "status", "says"),
    [
        ("/v1/chat/completions", b"{not json", 400, "not JSON"),
        ("/v1/chat/completions", json.dumps({**CHAT, "model": 3}).encode(), 400, "model"),
        ("/v1/chat/completions", json.dumps({**CHAT, "model": "x"}).encode(), 404, "'x'"),
        ("/v1/messages", json.dumps({**MESSAGES, "max_tokens": "9"}).encode(), 400, "max_tokens"),
        ("/v1/responses", b"[" * 200 + b"]" * 200, 400, "deeper"),
        ("/v1/chat/completions", b" " * 5000, 413, "over"),
        ("/v1/nothing", b"{}", 404, "no route"),
    ],
)
async def test_serve_bad_input_gets_the_wire_envelope_and_the_server_keeps_serving(
    path: str, content: bytes, status: int, says: str
) -> None:
    app = app_for(ScriptedBackend([[Text("ok")]]), limits=Limits(max_body=4096))
    async with served(app) as url, httpx.AsyncClient() as http:
        answer = await http.post(url + path, content=content)
        assert answer.status_code == status
        error = answer.json()["error"]
        assert says in error["message"]
        if path.startswith("/v1/messages"):
            assert answer.json()["type"] == "error"
        ok = await http.post(f"{url}/v1/chat/completions", json=CHAT)
        assert ok.json()["choices"][0]["message"]["content"] == "ok"


async def test_serve_a_client_that_never_finishes_its_body_gets_408() -> None:
    app = app_for(ScriptedBackend([[Text("ok")]]), limits=Limits(body_timeout=0.5))
    async with served(app) as url:
        port = int(url.rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            head = (
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                b"content-type: application/json\r\ncontent-length: 100\r\n\r\n{"
            )
            await stream.send_all(head)
            answer = b""
            with trio.fail_after(WAIT):
                while b"\r\n\r\n" not in answer:
                    answer += await stream.receive_some()
        assert answer.startswith(b"HTTP/1.1 408")
        async with httpx.AsyncClient() as http:  # and the others are still served
            assert (await http.post(f"{url}/v1/chat/completions", json=CHAT)).is_success


async def test_serve_an_error_before_any_item_is_the_wires_status_and_envelope() -> None:
    failing = ScriptedBackend([], error=ServerError(503, "", "overloaded"))
    async with served(app_for(failing)) as url, httpx.AsyncClient() as http:
        body = {**MESSAGES, "stream": True}
        answer = await http.post(f"{url}/v1/messages", json=body)
        assert answer.status_code == 529
        assert answer.json()["error"]["type"] == "overloaded_error"


async def test_serve_an_error_after_the_first_item_ends_the_stream_as_the_wire_does() -> None:
    failing = ScriptedBackend([[Text("part")]], error=ServerError(500, "", "boom"))
    async with served(app_for(failing)) as url, httpx.AsyncClient() as http:
        anthropic = await http.post(f"{url}/v1/messages", json={**MESSAGES, "stream": True})
        assert anthropic.status_code == 200
        assert frames(anthropic.content)[-1] == (
            "error",
            {"type": "error", "error": {"type": "api_error", "message": "boom"}},
        )
        chat = await http.post(f"{url}/v1/chat/completions", json={**CHAT, "stream": True})
        assert frames(chat.content)[-2][1]["error"]["message"] == "boom"
        assert frames(chat.content)[-1] == (None, "[DONE]")
        responses = await http.post(f"{url}/v1/responses", json={**RESPONSES, "stream": True})
        assert frames(responses.content)[-1][1]["type"] == "error"


async def test_serve_never_sends_an_upstream_key_back() -> None:
    key = "sk-upstream-secret-123"
    leaky = ScriptedBackend([], error=AuthenticationError(401, "", f"Incorrect API key: {key}"))
    app = app_for(leaky, secrets=[key])
    async with served(app) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/v1/chat/completions", json=CHAT)
    assert answer.status_code == 502  # the gateway's key, not the client's
    assert key not in answer.text and "<redacted>" in answer.text


async def _hang_up_during(backend: ScriptedBackend, body: dict[str, Any], read_first: bool) -> None:
    with request_log() as log:
        async with served(app_for(backend)) as url, httpx.AsyncClient() as http:
            with trio.fail_after(WAIT):
                async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as answer:
                    if read_first:
                        async for _ in answer.aiter_bytes():
                            break
                    await backend.waiting.wait()
                # leaving the block closed the connection: the turn is cancelled
                await backend.cancelled.wait()
                assert await log.line(0) == "POST /v1/chat/completions 499"


async def test_serve_a_hang_up_during_prefill_cancels_the_turn() -> None:
    backend = ScriptedBackend([[Text("never")]], hold=True)
    with request_log() as log:
        async with served(app_for(backend)) as url:
            with trio.fail_after(WAIT):
                stream = await raw_post(url, {**CHAT, "stream": True})
                await backend.waiting.wait()  # the turn runs; no byte of the answer was sent
                await stream.aclose()
                await backend.cancelled.wait()
                assert await log.line(0) == "POST /v1/chat/completions 499"


async def test_serve_a_hang_up_mid_stream_cancels_the_turn() -> None:
    backend = ScriptedBackend([[Text("a")], [Text("b")]], hold_after=1)
    await _hang_up_during(backend, {**CHAT, "stream": True}, read_first=True)


async def test_serve_logs_a_stream_that_ended_as_200_when_the_client_hangs_up_after_it() -> None:
    """The operator's log says 200 for a stream the client read to its end, whether the
    client hangs up the moment it has read ``[DONE]`` or keeps its connection for the
    next request (which that connection then carries): 499 is only for a client that
    hung up before the answer's end."""
    backend = ScriptedBackend([[Thinking("hm")], [Text("hel"), Text("lo")]])
    body = {**CHAT, "stream": True}
    with request_log() as log:
        async with served(app_for(backend)) as url:
            with trio.fail_after(WAIT):
                stream = await raw_post(url, body)
                read = b""
                while b"data: [DONE]" not in read:
                    read += await stream.receive_some()
                await stream.aclose()  # at once, as a client done with its answer does
                assert await log.line(0) == "POST /v1/chat/completions 200"
            async with httpx.AsyncClient() as http:
                for _ in range(2):  # one connection, kept alive between the two
                    answer = await http.post(f"{url}/v1/chat/completions", json=body)
                    assert frames(answer.content)[-1] == (None, "[DONE]")
            with trio.fail_after(WAIT):
                assert [await log.line(1), await log.line(2)] == [
                    "POST /v1/chat/completions 200"
                ] * 2
    # the log lines are what hold the fix (the answer's last body is sent after the
    # backend's turn has ended, so a 499 there never reached the backend); this holds
    # that neither turn was cut while it streamed
    assert not backend.cancelled.is_set()


async def test_serve_keys_charge_a_streamed_turn_its_usage_not_its_reservation() -> None:
    """A key's budget of 100 tokens: a streamed turn reserves 30 (10 prompt + 20
    max_tokens) and uses 90 (60 + 30). It is charged 90, so the next turn (30 more)
    is refused with the wire's 429; charged as a cancelled turn (its reservation, 30),
    it would have been let through."""
    backend = ScriptedBackend([[Text("ok")]], usage=TokenUsage(60, 30))
    limits = KeyLimits(budget={"tokens": 100, "clock": lambda: 1_800_000_000.0})
    app = ServeApp({"m": Backend(backend)}, key_limits=limits)
    body = {**CHAT, "max_tokens": 20, "stream": True}
    async with served(app) as url, httpx.AsyncClient(timeout=WAIT) as http:
        first = await http.post(f"{url}/v1/chat/completions", json=body)
        assert frames(first.content)[-1] == (None, "[DONE]")
        (budget,) = limits.gates(b"")
        with trio.fail_after(WAIT):
            while (await budget.spent())["tokens"] == 0:  # settled once the turn has ended
                await trio.sleep(0.01)
        assert (await budget.spent())["tokens"] == 90
        refused = await http.post(f"{url}/v1/chat/completions", json=body)
        assert refused.status_code == 429


async def test_serve_anthropic_stream_announces_input_tokens_when_the_backend_counts() -> None:
    backend = ScriptedBackend([[Thinking("plan"), ToolCall("call_1", "f", {"a": 1})]])
    app = ServeApp({"m": Backend(backend, counts_exactly=True)})
    async with served(app) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/v1/messages", json={**MESSAGES, "stream": True})
    events = frames(answer.content)
    assert events[0][1]["message"]["usage"]["input_tokens"] == 10  # counted first
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_serve_seals_thinking_and_opens_the_seal_on_the_next_turn() -> None:
    backend = ScriptedBackend([[Thinking("plan"), ToolCall("call_1", "f", {})]])
    async with served(app_for(backend)) as url, httpx.AsyncClient() as http:
        first = (await http.post(f"{url}/v1/messages", json=MESSAGES)).json()
        thinking = first["content"][0]
        assert thinking["type"] == "thinking" and thinking["signature"].startswith("cuca1.")
        turn = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": first["content"]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "42"}],
            },
        ]
        again = await http.post(f"{url}/v1/messages", json={**MESSAGES, "messages": turn})
        assert again.is_success
        assistant = backend.requests[-1].messages[1]
        assert assistant.role is MessageRole.ASSISTANT
        assert assistant.content[0] == Thinking("plan")  # the engine gets its own text back
        forged = {**thinking, "thinking": "edited"}
        turn[1] = {"role": "assistant", "content": [forged, first["content"][1]]}
        refused = await http.post(f"{url}/v1/messages", json={**MESSAGES, "messages": turn})
        assert refused.status_code == 400
        assert "invalid signature" in refused.json()["error"]["message"]


async def test_serve_count_tokens_answers_from_the_backend() -> None:
    backend = ScriptedBackend([])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with served(app_for(backend)) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/v1/messages/count_tokens", json=body)
    assert answer.json() == {"input_tokens": 10}


def test_serve_error_kinds_keep_each_wires_names() -> None:
    from cuca.providers.serving import error_kind

    assert error_kind(HttpStatusError(404, "", "gone")) == (404, "not_found")
    assert error_kind(ServerError(529, "", "busy")) == (529, "overloaded")
    assert TokenUsage(1, 2) == TokenUsage(1, 2)
