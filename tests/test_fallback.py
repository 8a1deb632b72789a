"""FallbackClient over loopback: it moves on only before the first item reaches the
caller, never sends a client a request more often than that client's retry policy
allows, and says who answered."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import trio
from support.transcripts import transcript

from cuca import (
    ConnectError,
    CucaClient,
    CucaError,
    FallbackClient,
    HttpStatusError,
    ProviderEndpoint,
    RetryPolicy,
    Step,
    StreamIncomplete,
    Text,
    UnifiedRequest,
)
from cuca.testing import Reply, open_replay_server

OPENAI, ANTHROPIC = ProviderEndpoint.OPENAI, ProviderEndpoint.ANTHROPIC
REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64)
TEXT = Reply(transcript("openai/text"))
UNAVAILABLE = Reply(b'{"error": {"message": "overloaded"}}', status=503)
ONE_RETRY = RetryPolicy(max_retries=1, initial_delay=0.0)


def closed_port_url() -> str:
    """A loopback URL where nothing listens: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def client(url: str, provider: ProviderEndpoint = OPENAI, **kwargs: Any) -> CucaClient:
    kwargs.setdefault("retry", RetryPolicy.never())
    return CucaClient(provider, base_url=url, api_key="k", **kwargs)


async def texts(stream: Any) -> str:
    return "".join([item.text async for item in stream if isinstance(item, Text)])


async def test_fallback_moves_on_before_the_first_item_within_each_retry_policy() -> None:
    async with open_replay_server(UNAVAILABLE) as a, open_replay_server(TEXT) as c:
        dead = closed_port_url()
        clients = [client(a.url, retry=ONE_RETRY), client(dead), client(c.url)]
        async with FallbackClient(clients) as fallback:
            async with fallback.generate_stream(REQUEST) as stream:
                text = await texts(stream)
        assert text == "I'm unable to provide real-time weather updates."
        # a: one request and the one retry its policy allows; the dead one: refused once
        assert (len(a.requests), len(c.requests)) == (2, 1)
        assert stream.response is not None and stream.response.endpoint == c.url


async def test_fallback_across_providers_and_models_says_who_answered() -> None:
    answer = Reply(transcript("anthropic/text"))
    async with open_replay_server(UNAVAILABLE) as a, open_replay_server(answer) as b:
        clients = [client(a.url), (client(b.url, ANTHROPIC), "claude-haiku-4-5")]
        async with FallbackClient(clients) as fallback:
            done = await fallback.generate(REQUEST)
        assert b.requests[0].json()["model"] == "claude-haiku-4-5"
        assert a.requests[0].json()["model"] == "gpt-4o"
    assert done.text == "Hello, wörld! ☀"
    assert (done.response.provider, done.response.endpoint) == (ANTHROPIC, b.url)
    assert done.response.model == "claude-haiku-4-5"


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_fallback_does_not_move_on_a_request_error(status: int) -> None:
    refused = Reply(b'{"error": {"message": "bad"}}', status=status)
    async with open_replay_server(refused) as a, open_replay_server(TEXT) as b:
        async with FallbackClient([client(a.url), client(b.url)]) as fallback:
            with pytest.raises(HttpStatusError) as caught:
                await fallback.generate(REQUEST)
        assert caught.value.status == status
        assert (len(a.requests), len(b.requests)) == (1, 0)  # b would refuse it the same way


async def test_fallback_never_after_the_first_item() -> None:
    body = transcript("openai/text")
    cut = Reply(body, cut_after=body.index(b"unable"))  # some text, then the socket closes
    async with open_replay_server(cut) as a, open_replay_server(TEXT) as b:
        async with FallbackClient([client(a.url), client(b.url)]) as fallback:
            seen: list[str] = []
            with pytest.raises(StreamIncomplete, match="connection closed mid-response"):
                async with fallback.generate_stream(REQUEST) as stream:
                    async for item in stream:
                        seen.append(item.text)
        assert seen and len(b.requests) == 0  # the caller saw part of a's answer: no b


async def test_fallback_last_error_is_raised_with_the_earlier_ones_noted() -> None:
    async with open_replay_server(UNAVAILABLE) as a:
        dead = closed_port_url()
        async with FallbackClient([client(a.url), client(dead)]) as fallback:
            with pytest.raises(ConnectError) as caught:
                await fallback.generate(REQUEST)
    assert caught.value.__notes__ == [
        'tried before: ServerError(503, \'{"error": {"message": "overloaded"}}\')'
    ]


async def test_fallback_on_is_configurable() -> None:
    refused = Reply(b'{"error": {"message": "context too long"}}', status=400)

    def on_400(error: CucaError) -> bool:
        return isinstance(error, HttpStatusError) and error.status == 400

    async with open_replay_server(refused) as a, open_replay_server(TEXT) as b:
        fallback = FallbackClient([client(a.url), client(b.url)], fallback_on=on_400)
        async with fallback:
            done = await fallback.generate(REQUEST)
        assert done.response.endpoint == b.url
        never = FallbackClient([client(a.url), client(b.url)], fallback_on=lambda e: False)
        async with never:
            with pytest.raises(HttpStatusError):
                await never.generate(REQUEST)
        assert (len(a.requests), len(b.requests)) == (2, 1)


async def test_fallback_run_tools_each_step_falls_back() -> None:
    calls = Reply(transcript("openai/parallel_tool_calls"))
    # a answers step 1 with calls, then is down; b answers step 2
    async with open_replay_server([calls, UNAVAILABLE]) as a, open_replay_server(TEXT) as b:

        def GetWeatherArgs(city: str, country: str, units: str) -> str:
            return "rain"

        def get_stock_price(ticker: str, exchange: str) -> str:
            return "227"

        async with FallbackClient([client(a.url), client(b.url)]) as fallback:
            tools = [GetWeatherArgs, get_stock_price]
            async with fallback.run_tools(REQUEST, tools) as stream:
                items = [item async for item in stream]
        assert items.count(Step(2)) == 1 and stream.complete
        assert [r.endpoint for r in stream.responses] == [a.url, b.url]
        # b got the whole conversation: the calls a made and their results
        sent = b.requests[0].json()["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]


async def test_fallback_dropped_stream_closes_the_answering_connection() -> None:
    endless = Reply.endless(transcript("openai/text").split(b"\n\n")[1] + b"\n\n")
    async with open_replay_server(UNAVAILABLE) as a, open_replay_server(endless) as b:
        async with FallbackClient([client(a.url), client(b.url)]) as fallback:
            async with fallback.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break
        with trio.fail_after(5):
            await b.wait_connections_closed()
            await a.wait_connections_closed()


def test_fallback_needs_a_client() -> None:
    with pytest.raises(CucaError, match="at least one client"):
        FallbackClient([])


OVERLOADED_IN_STREAM = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant",'
    b'"model":"claude","content":[],"usage":{"input_tokens":3,"output_tokens":0}}}\n\n'
    b"event: error\n"
    b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
)


async def test_fallback_moves_on_an_overloaded_error_inside_the_stream() -> None:
    """Anthropic's ``event: error`` with ``overloaded_error`` before any block is the
    kind a 529 gets (a ServerError), so fallback treats it as it treats the status."""
    overloaded = Reply(OVERLOADED_IN_STREAM)
    async with open_replay_server(overloaded) as a, open_replay_server(TEXT) as b:
        clients = [client(a.url, ANTHROPIC), client(b.url)]
        async with FallbackClient(clients) as fallback:
            done = await fallback.generate(REQUEST)
        assert (len(a.requests), len(b.requests)) == (1, 1)
    assert done.text == "I'm unable to provide real-time weather updates."


async def test_fallback_does_not_move_on_a_bad_request_inside_the_stream() -> None:
    """An ``invalid_request_error`` in the stream is the kind a 400 gets: raised at once."""
    bad = OVERLOADED_IN_STREAM.replace(b"overloaded_error", b"invalid_request_error")
    async with open_replay_server(Reply(bad)) as a, open_replay_server(TEXT) as b:
        clients = [client(a.url, ANTHROPIC), client(b.url)]
        async with FallbackClient(clients) as fallback:
            with pytest.raises(HttpStatusError) as info:
                await fallback.generate(REQUEST)
        assert (len(a.requests), len(b.requests)) == (1, 0)
    assert (info.value.status, info.value.provider) == (400, "anthropic")


async def test_fallback_moves_on_at_once_on_a_refused_connection(autojump_clock: object) -> None:
    """A dead server, then a live one, with the default retry policy (2 retries, 0.5 s
    backoff): the live server has the turn within 50 ms of the refusal, not after the
    dead client's backoff (1.3 to 1.6 s before). The clock is trio's mock one, which
    moves only by the sleeps a backoff would take: the verdict never depends on how
    busy the machine is."""
    arrived: list[float] = []

    def live(_request: Any) -> Reply:
        arrived.append(trio.current_time())
        return TEXT

    async with open_replay_server(live) as server:
        dead = CucaClient(OPENAI, base_url=closed_port_url(), api_key="k")
        async with FallbackClient([dead, client(server.url)]) as fallback:
            assert dead.retry.max_retries == 2  # the default policy, untouched
            await fallback.generate(REQUEST)  # the first turn imports the adapters
            started = trio.current_time()
            done = await fallback.generate(REQUEST)
    assert done.response.endpoint == server.url
    assert arrived[-1] - started < 0.05


async def test_fallback_retry_refused_keeps_each_clients_retries(autojump_clock: object) -> None:
    arrived: list[float] = []

    def live(_request: Any) -> Reply:
        arrived.append(trio.current_time())
        return TEXT

    slow = RetryPolicy(max_retries=1, initial_delay=0.2, jitter=0.0)
    async with open_replay_server(live) as server:
        dead = client(closed_port_url(), retry=slow)
        async with FallbackClient([dead, client(server.url)], retry_refused=True) as fallback:
            started = trio.current_time()
            await fallback.generate(REQUEST)
    assert arrived[0] - started >= 0.2  # one retry of the refused connection first


async def test_fallback_still_retries_what_a_server_answered() -> None:
    async with open_replay_server(UNAVAILABLE) as busy, open_replay_server(TEXT) as live:
        two = RetryPolicy(max_retries=2, initial_delay=0.0)
        async with FallbackClient([client(busy.url, retry=two), client(live.url)]) as fallback:
            await fallback.generate(REQUEST)
    assert len(busy.requests) == 3  # the 503 retried per the policy, then the next client
    assert len(live.requests) == 1


async def test_fallback_takes_a_clients_arguments_and_passes_them_on() -> None:
    """``FallbackClient`` is a ``TurnClient`` like ``CucaClient``: ``generate`` and
    ``generate_stream_with_response`` take the turn's own stages and headers, and the
    client that answers runs them (its request carries the header, the stage sees its
    blocks)."""
    from cuca.stages import after, tap

    seen: list[Any] = []
    stages = [after("decode", tap(seen.append))]
    async with open_replay_server(UNAVAILABLE) as a, open_replay_server([TEXT, TEXT]) as c:
        async with FallbackClient([client(a.url), client(c.url)]) as fallback:
            done = await fallback.generate(REQUEST, stages=stages, headers={"x-turn": "1"})
            pair = fallback.generate_stream_with_response(REQUEST, headers={"x-turn": "2"})
            async with pair as (stream, pending):
                assert await texts(stream) == done.text
    assert pending.value is not None and pending.value.endpoint == c.url
    assert [r.headers.get("x-turn") for r in c.requests] == ["1", "2"]
    assert any(isinstance(item, Text) for item in seen)
