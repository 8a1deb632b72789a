"""An error the server reports inside a 200 stream before anything of the answer is
retried as its status would be (issue 29, §2): an overload as a 529, a rate limit as a
429. Over real loopback HTTP with the replay server, for every adapter with in-stream
errors, fused and as actors."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from support.transcripts import transcript

from cuca import (
    CucaClient,
    CucaError,
    CucaPlugin,
    HttpStatusError,
    OpenAiApi,
    OpenAiConfig,
    ProviderEndpoint,
    RateLimitError,
    ReadTimeout,
    RetryPolicy,
    ServerError,
    Text,
    Timeouts,
    TurnObserver,
    TurnOutcome,
    UnifiedRequest,
    UnifiedResponse,
)
from cuca.errors import ProviderError
from cuca.providers.llamacpp.encode import LlamaCppConfig, LlamaRoute
from cuca.retry import RetryPolicy as Policy
from cuca.stages.opening import Opening
from cuca.stages.sse import SseEvent
from cuca.testing import Reply, open_replay_server
from cuca.turn import AttemptHead

JSON = [("content-type", "application/json")]


def sse(*frames: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return b"".join(f"{head}data: {json.dumps(frame)}\n\n".encode() for frame in frames)


def anthropic_error(kind: str) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": [],
            "usage": {"input_tokens": 3, "output_tokens": 0},
        },
    }
    error = {"type": "error", "error": {"type": kind, "message": f"{kind} says no"}}
    return sse(start, event="message_start") + sse(error, event="error")


def openai_error(kind: str) -> bytes:
    role = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    }
    error = {"error": {"message": f"{kind} says no", "type": kind, "param": None, "code": None}}
    return sse(role, error) + b"data: [DONE]\n\n"


def gemini_error(kind: str) -> bytes:
    code = {"UNAVAILABLE": 503, "RESOURCE_EXHAUSTED": 429, "INVALID_ARGUMENT": 400}[kind]
    error = {"code": code, "message": f"{kind} says no", "status": kind}
    return json.dumps({"error": error}).encode()


def responses_error(kind: str) -> bytes:
    failed = transcript("openai_responses/failed").split(b"event: response.failed")[0]
    error = {"type": "error", "sequence_number": 2, "code": kind, "message": f"{kind} says no"}
    return failed + sse(error, event="error")


def responses_late_error() -> bytes:
    """The Responses text transcript up to its first text delta, then a server error."""
    text = transcript("openai_responses/text")
    cut = text.index(b"\n\n", text.index(b"event: response.output_text.delta")) + 2
    error = {"type": "error", "sequence_number": 5, "code": "server_error", "message": "no"}
    return text[:cut] + sse(error, event="error")


def llamacpp_error(kind: str) -> bytes:
    code = {"server_error": 500, "unavailable_error": 503, "invalid_request_error": 400}[kind]
    role = {
        "choices": [{"finish_reason": None, "index": 0, "delta": {"role": "assistant"}}],
        "id": "chatcmpl-1",
        "model": "qwen3",
        "object": "chat.completion.chunk",
    }
    error = {"error": {"code": code, "message": f"{kind} says no", "type": kind}}
    return sse(role) + b": ping\n\n" + sse(error)


def completion_error(kind: str) -> bytes:
    """llama-server's ``/completion`` route: an error frame as the first frame."""
    code = {"server_error": 500, "unavailable_error": 503, "invalid_request_error": 400}[kind]
    return sse({"error": {"code": code, "message": f"{kind} says no", "type": kind}})


@attrs.frozen
class Backend:
    """A provider with in-stream errors: how its server says "overloaded", "rate
    limited" and "bad request" inside the stream, its clean answer, and an answer that
    fails after its first block."""

    provider: ProviderEndpoint
    model: str
    overloaded: bytes
    bad_request: bytes
    answer: bytes
    fails_late: bytes
    rate_limited: bytes | None = None
    config: Any = None


BACKENDS = {
    "anthropic": Backend(
        ProviderEndpoint.ANTHROPIC,
        "claude-sonnet-4-20250514",
        anthropic_error("overloaded_error"),
        anthropic_error("invalid_request_error"),
        transcript("anthropic/text"),
        transcript("anthropic/error"),
        anthropic_error("rate_limit_error"),
    ),
    "openai": Backend(
        ProviderEndpoint.OPENAI,
        "gpt-4o",
        openai_error("server_error"),
        openai_error("invalid_request_error"),
        transcript("openai/text"),
        transcript("openai/error"),
        openai_error("rate_limit_exceeded"),
    ),
    "gemini": Backend(
        ProviderEndpoint.GOOGLE_GEMINI,
        "gemini-2.0-flash",
        gemini_error("UNAVAILABLE"),
        gemini_error("INVALID_ARGUMENT"),
        transcript("gemini/text_signature"),
        transcript("gemini/raw_error"),
        gemini_error("RESOURCE_EXHAUSTED"),
    ),
    "llama_cpp": Backend(
        ProviderEndpoint.LLAMA_CPP,
        "qwen3",
        llamacpp_error("unavailable_error"),
        llamacpp_error("invalid_request_error"),
        transcript("llama_cpp/chat_text"),
        transcript("llama_cpp/chat_error"),
    ),
    "llama_cpp_completion": Backend(
        ProviderEndpoint.LLAMA_CPP,
        "qwen3",
        completion_error("unavailable_error"),
        completion_error("invalid_request_error"),
        transcript("llama_cpp/completion"),
        transcript("llama_cpp/completion").split(b"\n\n")[0]
        + b"\n\n"
        + completion_error("server_error"),
        config=LlamaCppConfig(route=LlamaRoute.COMPLETION),
    ),
    "openai_responses": Backend(
        ProviderEndpoint.OPENAI,
        "gpt-5",
        transcript("openai_responses/failed"),
        responses_error("invalid_request_error"),
        transcript("openai_responses/text"),
        responses_late_error(),
        transcript("openai_responses/error"),
        OpenAiConfig(api=OpenAiApi.RESPONSES),
    ),
}


def no_jitter(max_retries: int = 2) -> RetryPolicy:
    return RetryPolicy(max_retries=max_retries, jitter=0.0)


def client_for(backend: Backend, url: str, **kwargs: Any) -> CucaClient:
    config = backend.config
    return CucaClient(backend.provider, base_url=url, api_key="k", provider_config=config, **kwargs)


def request_for(backend: Backend) -> UnifiedRequest:
    return UnifiedRequest.new(backend.model).add_user_message("Weather in Paris?")


async def run(
    client: CucaClient, request: UnifiedRequest, fused: bool = True
) -> tuple[list[Any], UnifiedResponse | None, CucaError | None]:
    """What the consumer sees: the items, the response, the error that ended the turn."""
    items: list[Any] = []
    error: CucaError | None = None
    stream = None
    try:
        async with client.generate_stream(request, fused=fused) as stream:
            async for item in stream:
                items.append(item)
    except CucaError as exc:
        error = exc
    return items, (stream.response if stream is not None else None), error


async def clean_turn(backend: Backend) -> tuple[list[Any], UnifiedResponse | None]:
    """The answer alone, sent once: what the consumer must see after a resend."""
    async with open_replay_server(Reply(backend.answer)) as server:
        async with client_for(backend, server.url) as client:
            items, response, error = await run(client, request_for(backend))
    assert error is None
    return items, response


# -- the decision, I/O-free -----------------------------------------------------------


def test_retry_resend_delay_treats_an_in_stream_error_as_its_status() -> None:
    policy = Policy(jitter=0.0)
    overloaded = ServerError(529, "{}", "overloaded", provider="anthropic")
    assert policy.resend_delay(overloaded, 0) == 0.5
    assert policy.resend_delay(overloaded, 1) == 1.0
    assert policy.resend_delay(overloaded, 2) is None  # max_retries=2 used up
    limited = RateLimitError(429, "{}", "slow down", 3.0, provider="openai")
    assert policy.resend_delay(limited, 0) == 3.0  # the wait the error asked for
    too_long = RateLimitError(429, "{}", "slow down", 3600.0, provider="openai")
    assert policy.resend_delay(too_long, 0) is None  # past max_retry_after: raised at once
    bad = HttpStatusError(400, "{}", "bad", provider="anthropic")
    assert policy.resend_delay(bad, 0) is None
    as_status = ServerError(503, "down")  # a real status is the transport's own retry
    assert policy.resend_delay(as_status, 0) is None
    assert policy.resend_delay(ProviderError("openai", "odd frame"), 0) is None
    assert policy.resend_delay(None, 0) is None
    assert Policy.never().resend_delay(overloaded, 0) is None


class _Decoder:
    """Items for ``T`` frames, a ServerError for ``X``, the end at ``[DONE]``."""

    finished = False

    def feed(self, event: SseEvent) -> list[Any]:
        if event.data == "[DONE]":
            self.finished = True
            return []
        if event.data == "X":
            raise ServerError(529, "X", "overloaded", provider="fake")
        return [Text(event.data[2:])] if event.data.startswith("T ") else []

    def close(self) -> list[Any]:
        return []

    def summary(self) -> Any:
        raise NotImplementedError


def opening(limit: int = 1 << 18) -> Opening:
    from cuca.stages.sse import SseParser

    return Opening(SseParser(), _Decoder(), limit)


def test_retry_opening_decides_at_the_first_item_or_error() -> None:
    probe = opening()
    assert not probe.feed(b"data: ping\n\ndata: T hel")
    assert probe.feed(b"lo\n\ndata: X\n\n")  # the block came first: no error to resend
    assert probe.error is None
    probe = opening()
    assert probe.feed(b"data: ping\n\ndata: X\n\ndata: T late\n\n")
    assert isinstance(probe.error, ServerError)
    probe = opening()
    assert probe.feed(b"data: [DONE]\n\n") and probe.error is None  # an empty answer
    probe = opening()
    assert not probe.feed(b"data: ping\n\n")
    probe.close()  # the body ended without an item: decided, nothing to resend
    assert probe.decided and probe.error is None
    probe = opening(limit=10)
    assert probe.feed(b"data: ping\n\n") and probe.error is None  # too long without an item


def test_retry_opening_feed_answers_a_bool() -> None:
    """``decided`` and what ``feed`` answers are the bools the signature says: ``False``
    until the opening is decided (not another false value), ``True`` after."""
    probe = opening()
    assert probe.decided is False
    assert probe.feed(b"data: ping\n\n") is False
    assert probe.feed(b"data: T hi\n\n") is True and probe.decided is True


def test_retry_opening_holds_up_to_its_limit_bytes() -> None:
    """An opening reads ``limit`` body bytes without an item and still decides nothing;
    the byte past them decides (the answer is passed on, never sent again); what comes
    after the decision changes nothing."""
    probe = opening(limit=12)
    assert not probe.feed(b"data: ping\n\n")  # 12 bytes: held
    assert not probe.decided
    assert probe.feed(b":")  # the 13th: too long without an item
    assert probe.error is None
    assert probe.feed(b"\n\ndata: X\n\n") and probe.error is None  # decided already
    probe.close()
    assert probe.error is None


class _Unfinished(_Decoder):
    """A decoder whose body ended before its end marker, as a real one says it."""

    def close(self) -> list[Any]:
        from cuca import StreamIncomplete

        raise StreamIncomplete("stream ended before the turn was complete")


def test_retry_opening_decides_at_the_body_end_from_what_is_held() -> None:
    """``close()``: the decoder's own end decides: a decoder that says the answer is
    incomplete gives that error (what the turn's own decoder raises from the same
    bytes); a decided opening keeps its first decision."""
    from cuca import StreamIncomplete
    from cuca.stages.sse import SseParser

    probe = Opening(SseParser(), _Unfinished(), 1 << 18)
    assert not probe.feed(b"data: ping\n\n")
    probe.close()
    assert isinstance(probe.error, StreamIncomplete)
    probe = opening()
    assert probe.feed(b"data: X\n\n")
    first = probe.error
    probe.close()
    assert probe.error is first


# -- over HTTP --------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "actors"])
@pytest.mark.parametrize("name", sorted(BACKENDS))
async def test_retry_in_stream_overload_before_any_block_is_sent_again(
    name: str, fused: bool, autojump_clock: object
) -> None:
    """The server says "overloaded" inside the stream before any block, then answers:
    the user sees the answer alone, as if the first attempt never happened (the same
    items and response as a clean turn), after one backoff; the server got 2 requests."""
    backend = BACKENDS[name]
    expected_items, expected_response = await clean_turn(backend)
    replies = [Reply(backend.overloaded), Reply(backend.answer)]
    async with open_replay_server(replies) as server:
        async with client_for(backend, server.url, retry=no_jitter()) as client:
            start = trio.current_time()
            items, response, error = await run(client, request_for(backend), fused)
            waited = trio.current_time() - start
        first, second = server.requests
    assert error is None
    assert items == expected_items
    assert response == attrs.evolve(expected_response, endpoint=server.url)
    assert first.body == second.body  # the same request, sent again
    assert waited == pytest.approx(0.5, abs=0.05)  # initial_delay, no jitter


@pytest.mark.parametrize("name", [n for n, b in sorted(BACKENDS.items()) if b.rate_limited])
async def test_retry_in_stream_rate_limit_before_any_block_is_sent_again(
    name: str, autojump_clock: object
) -> None:
    """A rate limit reported in the stream is retried as a 429 would be."""
    backend = BACKENDS[name]
    assert backend.rate_limited is not None
    expected_items, _ = await clean_turn(backend)
    replies = [Reply(backend.rate_limited), Reply(backend.answer)]
    async with open_replay_server(replies) as server:
        async with client_for(backend, server.url, retry=no_jitter()) as client:
            items, response, error = await run(client, request_for(backend))
        assert len(server.requests) == 2
    assert error is None and response is not None
    assert items == expected_items


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "actors"])
@pytest.mark.parametrize("name", sorted(BACKENDS))
async def test_retry_in_stream_overload_every_time_raises_after_max_retries(
    name: str, fused: bool, autojump_clock: object
) -> None:
    """Overloaded on every attempt: after max_retries+1 requests and the backoffs
    (0.5 s, then 1 s), the user gets the ServerError, in-stream, no item."""
    backend = BACKENDS[name]
    async with open_replay_server(Reply(backend.overloaded)) as server:
        async with client_for(backend, server.url, retry=no_jitter()) as client:
            start = trio.current_time()
            items, response, error = await run(client, request_for(backend), fused)
            waited = trio.current_time() - start
        assert len(server.requests) == 3
    assert items == [] and response is None
    assert isinstance(error, ServerError) and error.in_stream
    assert waited == pytest.approx(1.5, abs=0.05)


@pytest.mark.parametrize("name", [n for n, b in sorted(BACKENDS.items()) if b.rate_limited])
async def test_retry_in_stream_rate_limit_every_time_raises_a_rate_limit_error(
    name: str, autojump_clock: object
) -> None:
    backend = BACKENDS[name]
    assert backend.rate_limited is not None
    async with open_replay_server(Reply(backend.rate_limited)) as server:
        async with client_for(backend, server.url, retry=no_jitter(1)) as client:
            items, _, error = await run(client, request_for(backend))
        assert len(server.requests) == 2
    assert items == [] and isinstance(error, RateLimitError) and error.in_stream


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "actors"])
@pytest.mark.parametrize("name", sorted(BACKENDS))
async def test_retry_in_stream_error_after_a_block_is_never_sent_again(
    name: str, fused: bool
) -> None:
    """The error comes after the first block (its transcript): the user sees the blocks
    that came, then the error; the server got exactly one request."""
    backend = BACKENDS[name]
    async with open_replay_server(Reply(backend.fails_late)) as server:
        async with client_for(backend, server.url, retry=no_jitter()) as client:
            items, response, error = await run(client, request_for(backend), fused)
        assert len(server.requests) == 1
    assert any(isinstance(item, Text) and item.text for item in items)
    assert isinstance(error, ServerError) and error.in_stream and response is None


@pytest.mark.parametrize("name", sorted(BACKENDS))
async def test_retry_in_stream_bad_request_is_never_sent_again(name: str) -> None:
    """An invalid-request kind in the stream is a 400: raised at once, one request."""
    backend = BACKENDS[name]
    replies = [Reply(backend.bad_request), Reply(backend.answer)]
    async with open_replay_server(replies) as server:
        async with client_for(backend, server.url, retry=no_jitter()) as client:
            items, _, error = await run(client, request_for(backend))
        assert len(server.requests) == 1
    assert items == []
    assert type(error) is HttpStatusError and error.status == 400 and error.in_stream


@pytest.mark.parametrize("name", sorted(BACKENDS))
async def test_retry_in_stream_never_policy_sends_once(name: str) -> None:
    """RetryPolicy.never(): the overload is raised at once, one request."""
    backend = BACKENDS[name]
    replies = [Reply(backend.overloaded), Reply(backend.answer)]
    async with open_replay_server(replies) as server:
        async with client_for(backend, server.url, retry=RetryPolicy.never()) as client:
            items, _, error = await run(client, request_for(backend))
        assert len(server.requests) == 1
    assert items == [] and isinstance(error, ServerError)


async def test_retry_in_stream_and_status_retries_share_max_retries(
    autojump_clock: object,
) -> None:
    """A 503, then an overload in the stream, then the answer would be a third retry:
    with max_retries=1 the user gets the in-stream ServerError after 2 requests."""
    backend = BACKENDS["anthropic"]
    replies = [
        Reply(b'{"type":"error","error":{"type":"api_error"}}', status=503, headers=JSON),
        Reply(backend.overloaded),
        Reply(backend.answer),
    ]
    async with open_replay_server(replies) as server:
        async with client_for(backend, server.url, retry=no_jitter(1)) as client:
            items, _, error = await run(client, request_for(backend))
        assert len(server.requests) == 2
    assert items == [] and isinstance(error, ServerError) and error.in_stream


async def test_retry_in_stream_stall_before_the_first_block_is_never_sent_again() -> None:
    """The server sends the stream's first frame, then nothing: it may be answering, so
    the user gets the ReadTimeout and the server saw exactly one request (§6)."""
    backend = BACKENDS["anthropic"]
    start_frame = backend.overloaded.split(b"event: error")[0]
    reply = Reply(backend.overloaded, stall_after=len(start_frame))
    async with open_replay_server(reply) as server:
        timeouts = Timeouts(read=0.3)
        async with client_for(backend, server.url, retry=no_jitter(3), timeout=timeouts) as c:
            items, _, error = await run(c, request_for(backend))
        assert len(server.requests) == 1
    assert items == [] and isinstance(error, ReadTimeout)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "actors"])
async def test_retry_in_stream_drop_during_the_backoff_is_clean(
    fused: bool, autojump_clock: object
) -> None:
    """The consumer leaves during the 10 s backoff: the block ends at once, the failed
    attempt's connection was closed before the wait, and nothing is sent again later."""
    backend = BACKENDS["anthropic"]
    replies = [Reply(backend.overloaded), Reply(backend.answer)]
    policy = RetryPolicy(initial_delay=10.0, jitter=0.0)
    async with open_replay_server(replies) as server:
        async with client_for(backend, server.url, retry=policy) as client:
            open_during_wait: list[int] = []
            with trio.move_on_after(5) as scope:
                async with client.generate_stream(request_for(backend), fused=fused) as stream:
                    async with trio.open_nursery() as nursery:

                        async def look() -> None:
                            await trio.sleep(4)
                            open_during_wait.append(server.open_connections)

                        nursery.start_soon(look)
                        async for _ in stream:
                            raise AssertionError("no item may arrive")
            assert scope.cancelled_caught
            assert trio.current_time() == pytest.approx(5, abs=0.05)
            await trio.sleep(30)  # long past the backoff: no task is left to send again
            assert len(server.requests) == 1
        with trio.fail_after(5):
            await server.wait_connections_closed()
    assert open_during_wait == [0]
    assert stream.response is None


class _Watcher(CucaPlugin):
    """Counts what a plugin sees of a turn: its hooks, its observer, its gate."""

    name = "watcher"
    observes_raw = True

    def __init__(self) -> None:
        self.requests = 0
        self.raw: list[bytes] = []
        self.items: list[Any] = []
        self.ends: list[TurnOutcome] = []
        self.admitted = 0
        self.heads: list[int] = []
        self.settled: list[str] = []

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        self.requests += 1
        return request

    def observe(self, request: UnifiedRequest) -> TurnObserver | None:
        watcher = self

        class Observer(TurnObserver):
            raw = True

            def on_raw(self, chunks: Sequence[bytes]) -> None:
                watcher.raw += chunks

            def on_items(self, items: Sequence[Any]) -> None:
                watcher.items += items

            def on_end(self, end: TurnOutcome) -> None:
                watcher.ends.append(end)

        return Observer()

    async def admit(self, request: UnifiedRequest, count: Any) -> Any:
        self.admitted += 1
        watcher = self

        class Ticket:
            async def on_head(self, head: AttemptHead) -> None:
                watcher.heads.append(head.status)

            async def settle(self, end: TurnOutcome) -> None:
                watcher.settled.append(end.status)

        return Ticket()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "actors"])
async def test_retry_in_stream_resend_is_one_turn_for_plugins_observers_and_gates(
    fused: bool, autojump_clock: object
) -> None:
    """A resend is inside the turn: on_request ran once (the hooked request is sent
    again), the gate admitted once and settled once (it saw each attempt's head), the
    observer saw one turn with the answer's bytes and items only (a session log of it
    replays as the answer)."""
    backend = BACKENDS["anthropic"]
    answer = backend.answer
    replies = [Reply(backend.overloaded), Reply(answer)]
    watcher = _Watcher()
    async with open_replay_server(replies) as server:
        kwargs: dict[str, Any] = {"retry": no_jitter(), "plugins": [watcher]}
        async with client_for(backend, server.url, **kwargs) as client:
            items, response, error = await run(client, request_for(backend), fused)
        assert len(server.requests) == 2
    assert error is None and response is not None
    assert watcher.requests == 1
    # the gate hears both attempts' heads (the resent one's rate-limit headers count)
    assert (watcher.admitted, watcher.heads, watcher.settled) == (1, [200, 200], ["ok"])
    assert b"".join(watcher.raw) == answer
    assert watcher.items == items
    assert [end.status for end in watcher.ends] == ["ok"]


async def test_retry_in_stream_session_log_and_trace_hold_the_answer_alone(
    tmp_path: Path, autojump_clock: object
) -> None:
    """The session log holds one ok turn whose raw bytes are the answer's (replayed, it
    gives the same blocks), and the trace one span without an error status."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from cuca import SessionLog
    from cuca.observers.otel import OtelPlugin
    from cuca.testing import logged_reply

    backend = BACKENDS["anthropic"]
    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    with SessionLog(tmp_path / "log.db", raw=True) as log:
        plugins = [log, OtelPlugin(tracer_provider=tracer)]
        replies = [Reply(backend.overloaded), Reply(backend.answer)]
        async with open_replay_server(replies) as server:
            async with client_for(backend, server.url, plugins=plugins) as client:
                done = await client.generate(request_for(backend))
            assert len(server.requests) == 2
        (turn,) = log.turns()
    assert turn.status == "ok" and turn.error is None
    assert turn.raw == backend.answer
    assert turn.blocks == done.blocks
    async with open_replay_server(logged_reply(turn)) as server:
        async with client_for(backend, server.url) as client:
            assert (await client.generate(request_for(backend))).blocks == done.blocks
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.UNSET


async def test_retry_in_stream_fallback_resends_within_each_client_first(
    autojump_clock: object,
) -> None:
    """A FallbackClient over a client with one retry whose server is overloaded in the
    stream: that client sends twice (its own policy), then the next client answers."""
    from cuca import FallbackClient

    backend = BACKENDS["anthropic"]
    async with (
        open_replay_server(Reply(backend.overloaded)) as busy,
        open_replay_server(Reply(backend.answer)) as live,
    ):
        clients = [
            client_for(backend, busy.url, retry=no_jitter(1)),
            client_for(backend, live.url, retry=no_jitter(1)),
        ]
        async with FallbackClient(clients) as fallback:
            done = await fallback.generate(request_for(backend))
        assert (len(busy.requests), len(live.requests)) == (2, 1)
    assert done.text and done.response.endpoint == live.url


async def test_retry_in_stream_pool_moves_to_another_server_without_resending(
    autojump_clock: object,
) -> None:
    """A pool does not resend on the same server: an overload in the stream moves the
    turn to the other server at once (each server sees one request)."""
    backend = BACKENDS["anthropic"]
    async with (
        open_replay_server(Reply(backend.overloaded)) as busy,
        open_replay_server(Reply(backend.answer)) as live,
    ):
        urls = [busy.url, live.url]
        async with CucaClient(backend.provider, base_url=urls, api_key="k") as client:
            start = trio.current_time()
            for _ in range(2):  # whichever server the pool picks first
                done = await client.generate(request_for(backend))
                assert done.response.endpoint == live.url
            assert trio.current_time() == start  # no backoff was waited
        assert len(busy.requests) == 1
