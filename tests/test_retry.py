"""Retries before the first body byte: statuses, Retry-After, backoff (on a mock clock)."""

from __future__ import annotations

import email.utils
import functools

import pytest
import trio
from support.fake_adapter import FAKE, frames
from support.http_requests import read_request

from cuca import (
    CucaClient,
    HttpStatusError,
    ReadTimeout,
    RetryPolicy,
    Text,
    Timeouts,
    TransportError,
    UnifiedRequest,
)
from cuca.retry import parse_retry_after
from cuca.testing import Reply, open_replay_server

REQUEST = UnifiedRequest.new("fake-model").add_user_message("hi")
JSON = [("content-type", "application/json")]


def no_jitter(**kwargs: float) -> RetryPolicy:
    return RetryPolicy(jitter=0.0, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
async def test_retry_retryable_status_then_success(status: int, autojump_clock: object) -> None:
    replies = [Reply(b'{"error":"busy"}', status=status, headers=JSON), Reply(frames("ok"))]
    async with open_replay_server(replies) as server:
        async with CucaClient(FAKE, base_url=server.url, retry=no_jitter()) as client:
            start = trio.current_time()
            done = await client.generate(REQUEST)
            waited = trio.current_time() - start
    assert done.text == "ok"
    assert len(server.requests) == 2
    assert waited == pytest.approx(0.5, abs=0.05)  # initial_delay, no jitter


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
async def test_retry_client_errors_are_not_retried(status: int, autojump_clock: object) -> None:
    async with open_replay_server(Reply(b"no", status=status, headers=JSON)) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            with pytest.raises(HttpStatusError) as info:
                await client.generate(REQUEST)
    assert info.value.status == status
    assert len(server.requests) == 1


async def test_retry_gives_up_after_max_retries_with_backoff(autojump_clock: object) -> None:
    async with open_replay_server(Reply(b"down", status=503, headers=JSON)) as server:
        async with CucaClient(FAKE, base_url=server.url, retry=no_jitter()) as client:
            start = trio.current_time()
            with pytest.raises(HttpStatusError, match="503"):
                await client.generate(REQUEST)
            waited = trio.current_time() - start
    assert len(server.requests) == 3  # the default: 2 retries
    assert waited == pytest.approx(0.5 + 1.0, abs=0.05)


async def test_retry_honours_retry_after_seconds(autojump_clock: object) -> None:
    limited = Reply(b"slow down", status=429, headers=[*JSON, ("retry-after", "7")])
    async with open_replay_server([limited, Reply(frames("ok"))]) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            start = trio.current_time()
            assert (await client.generate(REQUEST)).text == "ok"
            assert trio.current_time() - start == pytest.approx(7, abs=0.05)


def test_retry_after_http_date() -> None:
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(date, now) == pytest.approx(30)
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("soon") is None
    policy = no_jitter()
    assert policy.delay(0, date, now) == pytest.approx(30)
    assert policy.delay(3) == 4.0
    assert policy.delay(10) == 8.0  # capped at max_delay
    assert policy.delay(0, "3600") is None  # a hint beyond max_retry_after: give up


def test_retry_jitter_stays_within_bounds() -> None:
    low = RetryPolicy(rng=lambda: 1.0)
    high = RetryPolicy(rng=lambda: 0.0)
    assert low.delay(1) == pytest.approx(0.75)
    assert high.delay(1) == pytest.approx(1.0)


async def test_retry_per_call_policy_wins(autojump_clock: object) -> None:
    async with open_replay_server(Reply(b"down", status=500, headers=JSON)) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            with pytest.raises(HttpStatusError):
                await client.generate(REQUEST, retry=RetryPolicy.never())
    assert len(server.requests) == 1


async def test_retry_connection_refused_is_retried_then_reported(autojump_clock: object) -> None:
    async with CucaClient(FAKE, base_url="http://127.0.0.1:9", retry=no_jitter()) as client:
        start = trio.current_time()
        with pytest.raises(TransportError, match="ConnectError"):
            await client.generate(REQUEST)
        assert trio.current_time() - start == pytest.approx(1.5, abs=0.05)


async def test_retry_never_once_the_body_has_started() -> None:
    """A cut after blocks were yielded is reported, not retried (nothing is duplicated)."""
    body = frames("a", "b", "c")
    async with open_replay_server([Reply(body, cut_after=len(b"data: T a\n\n") + 3)]) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            items = []
            with pytest.raises(TransportError):
                async with client.generate_stream(REQUEST) as stream:
                    async for item in stream:
                        items.append(item)
    assert items == [Text("a")]
    assert len(server.requests) == 1


@pytest.mark.parametrize("then", ["disconnect", "stall"])
async def test_retry_never_once_the_request_may_have_reached_the_server(then: str) -> None:
    """A server that reads the whole request, then drops the connection or stalls before
    the status line, may be answering (and billing) the turn: the user gets one typed
    error, and the server sees exactly one request, retries or not."""
    received: list[bytes] = []

    async def handler(stream: trio.SocketStream) -> None:
        head = await read_request(stream)
        assert head is not None
        received.append(head)
        if then == "stall":
            await trio.sleep_forever()
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        (listener,) = await nursery.start(serve)
        port = listener.socket.getsockname()[1]
        policy = RetryPolicy(max_retries=3, initial_delay=0.0)
        timeouts = Timeouts(read=0.5)
        url = f"http://127.0.0.1:{port}"
        async with CucaClient(FAKE, base_url=url, retry=policy, timeout=timeouts) as client:
            with pytest.raises(TransportError) as info:
                await client.generate(REQUEST)
        nursery.cancel_scope.cancel()
    assert type(info.value) is (ReadTimeout if then == "stall" else TransportError)
    assert len(received) == 1
