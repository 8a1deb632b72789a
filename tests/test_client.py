"""The client over a real loopback server, with the minimal fake adapter."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from support.fake_adapter import FAKE, frames

from cuca import (
    AuthenticationError,
    ConfigurationError,
    ConnectError,
    CucaClient,
    CucaPlugin,
    DeadlineExceeded,
    HttpStatusError,
    PluginError,
    ProviderEndpoint,
    ProviderError,
    RateLimitError,
    ReadTimeout,
    RetryPolicy,
    ServerError,
    StreamIncomplete,
    Text,
    TransportError,
    UnifiedRequest,
    merge_blocks,
)
from cuca.testing import Reply, open_replay_server

REQUEST = UnifiedRequest.new("fake-model").add_user_message("hi")


async def collect(client: CucaClient, request: UnifiedRequest = REQUEST) -> list[Any]:
    items: list[Any] = []
    async with client.generate_stream(request) as stream:
        async for item in stream:
            items.append(item)
    return items


async def test_client_streams_blocks_and_response() -> None:
    async with open_replay_server(Reply(frames("a", "b", "c"), chunks=[3, 5])) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            async with client.generate_stream(REQUEST) as stream:
                assert stream.response is None
                items = [item async for item in stream]
            assert items == [Text("a"), Text("b"), Text("c")]
            assert stream.response is not None
            assert stream.response.usage is not None
            assert stream.response.usage.completion_tokens == 3
            assert stream.response.provider == FAKE
            assert stream.response.finish_reason == "stop"


async def test_client_overwrites_provider_before_hooks() -> None:
    seen: list[Any] = []

    class Reader(CucaPlugin):
        name = "reader"

        async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
            seen.append(request.provider)
            return request

    async with open_replay_server(Reply(frames("x"))) as server:
        async with CucaClient(FAKE, base_url=server.url, plugins=[Reader()]) as client:
            await collect(client, REQUEST)  # REQUEST.provider is custom("")
    assert seen == [FAKE]
    assert server.requests[0].json()["provider"] == "custom:fake"


async def test_client_yields_non_fatal_errors_and_goes_on() -> None:
    body = b"data: T a\n\ndata: E bad tool call\n\ndata: T b\n\ndata: [DONE]\n\n"
    async with open_replay_server(Reply(body)) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            items = await collect(client)
    assert items == [Text("a"), ProviderError("fake", "bad tool call"), Text("b")]


async def test_client_raises_fatal_error_after_earlier_items() -> None:
    body = b"data: T a\n\ndata: T b\n\ndata: F server exploded\n\ndata: T never\n\n"
    async with open_replay_server(Reply(body)) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            items: list[Any] = []
            with pytest.raises(ProviderError, match="server exploded"):
                async with client.generate_stream(REQUEST) as stream:
                    async for item in stream:
                        items.append(item)
            assert stream.response is None
    assert items == [Text("a"), Text("b")]


async def test_client_truncated_stream_is_stream_incomplete() -> None:
    """A body that ends cleanly but before the end marker: the user can catch it as
    StreamIncomplete (a TransportError)."""
    async with open_replay_server(Reply(frames("a", done=False))) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            with pytest.raises(StreamIncomplete, match="ended before") as info:
                await collect(client)
    assert isinstance(info.value, TransportError)


async def test_client_cut_connection_is_stream_incomplete() -> None:
    body = frames("a", "b")
    async with open_replay_server(Reply(body, cut_after=12)) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            with pytest.raises(StreamIncomplete, match="connection closed mid-response"):
                await collect(client)


async def test_client_http_status_error_carries_body_and_message() -> None:
    reply = Reply(b'{"error": "quota"}', status=429, headers=[("content-type", "application/json")])
    async with open_replay_server(reply) as server:
        async with CucaClient(
            FAKE, base_url=server.url, api_key="sk-secret", retry=RetryPolicy.never()
        ) as client:
            with pytest.raises(HttpStatusError) as info:
                await collect(client)
    error = info.value
    assert error.status == 429
    assert error.body == '{"error": "quota"}'
    assert str(error) == 'http status 429: fake says: {"error": "quota"}'
    assert "sk-secret" not in repr(error) + str(error)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, AuthenticationError), (403, AuthenticationError), (503, ServerError), (404, None)],
)
async def test_client_http_status_errors_have_a_kind(status: int, kind: type | None) -> None:
    """401/403 and 5xx are caught by kind; other statuses are a plain HttpStatusError."""
    async with open_replay_server(Reply(b"no", status=status)) as server:
        async with CucaClient(FAKE, base_url=server.url, retry=RetryPolicy.never()) as client:
            with pytest.raises(HttpStatusError) as info:
                await collect(client)
    assert type(info.value) is (kind or HttpStatusError)
    assert info.value.status == status
    assert repr(info.value) == f"{type(info.value).__name__}({status}, 'no')"


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), ("0.5", 0.5), (None, None), ("soon", None)],
)
async def test_client_rate_limit_error_reads_retry_after(
    header: str | None, seconds: float | None
) -> None:
    headers = [("retry-after", header)] if header is not None else []
    async with open_replay_server(Reply(b"slow down", status=429, headers=headers)) as server:
        async with CucaClient(FAKE, base_url=server.url, retry=RetryPolicy.never()) as client:
            with pytest.raises(RateLimitError) as info:
                await collect(client)
    assert info.value.retry_after == seconds
    assert info.value.status == 429


async def test_client_rate_limit_error_reads_an_http_date() -> None:
    headers = [("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]  # long past: no wait
    async with open_replay_server(Reply(b"slow down", status=429, headers=headers)) as server:
        async with CucaClient(FAKE, base_url=server.url, retry=RetryPolicy.never()) as client:
            with pytest.raises(RateLimitError) as info:
                await collect(client)
    assert info.value.retry_after == 0.0


async def test_client_unreachable_server_is_a_connect_error() -> None:
    async with CucaClient(
        FAKE, base_url="http://127.0.0.1:9", retry=RetryPolicy.never()
    ) as client:
        with pytest.raises(ConnectError, match="ConnectError") as info:
            await collect(client)
    assert isinstance(info.value, TransportError)


async def test_client_stalled_read_is_a_read_timeout() -> None:
    async with open_replay_server(Reply(frames("a"), stall_after=10)) as server:
        async with CucaClient(FAKE, base_url=server.url, timeout=0.2) as client:
            with trio.fail_after(30):  # a guard against a hang, not a measure
                with pytest.raises(ReadTimeout, match="timed out"):
                    await collect(client)


async def test_client_total_deadline_is_deadline_exceeded() -> None:
    from cuca import Timeouts

    async with open_replay_server(Reply.endless(b"data: T x\n\n", delay=0.01)) as server:
        async with CucaClient(FAKE, base_url=server.url, timeout=Timeouts(total=0.3)) as client:
            with trio.fail_after(30):  # a guard against a hang, not a measure
                with pytest.raises(DeadlineExceeded, match="deadline") as info:
                    await collect(client)
    assert isinstance(info.value, TransportError)


async def test_client_timeouts_beside_its_own_http_client_are_refused_or_total() -> None:
    """cuca sends on a client's own httpx client as it is: a read timeout given beside
    it would never fire (a stalled stream hung), so it is refused, saying where it
    goes; ``total``, cuca's own deadline, still ends a turn."""
    import httpx

    from cuca import Timeouts

    async with httpx.AsyncClient(timeout=None) as http:
        for timeout in (0.2, Timeouts(read=0.2)):
            with pytest.raises(ConfigurationError, match=r"give that client its timeouts"):
                CucaClient(FAKE, base_url="http://127.0.0.1:9", timeout=timeout, http_client=http)
        async with open_replay_server(Reply.endless(b"data: T x\n\n", delay=0.01)) as server:
            async with CucaClient(
                FAKE, base_url=server.url, timeout=Timeouts(total=0.3), http_client=http
            ) as client:
                with trio.fail_after(30), pytest.raises(DeadlineExceeded):  # (a hang guard)
                    await collect(client)


async def test_client_reuses_its_connection_pool() -> None:
    async with open_replay_server(Reply(frames("a"))) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            for _ in range(3):
                assert await collect(client) == [Text("a")]
        assert server.connections_opened == 1


async def test_client_generate_collects_and_merges() -> None:
    async with open_replay_server(Reply(frames("Hel", "lo"))) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            done = await client.generate(REQUEST)
    assert done.text == "Hello"
    assert done.blocks == (Text("Hello"),)
    assert done.errors == ()
    assert done.response.usage is not None


def test_merge_blocks_keeps_signed_text_apart() -> None:
    """A signed Text (Gemini's thoughtSignature on a text part) is replayed with its
    signature: the unsigned text after it is another block, never fused into it (the
    merged block would be unsigned, or sign text the signature never covered)."""
    signed = Text("a", signature="s", provider=ProviderEndpoint.GOOGLE_GEMINI)
    assert merge_blocks([signed, Text("b")]) == (signed, Text("b"))
    assert merge_blocks([Text("x"), signed, Text("b"), Text("c")]) == (
        Text("xa", signature="s", provider=ProviderEndpoint.GOOGLE_GEMINI),
        Text("bc"),
    )
    second = Text("d", signature="t", provider=ProviderEndpoint.GOOGLE_GEMINI)
    assert merge_blocks([signed, second]) == (signed, second)


async def test_client_generate_stream_with_response() -> None:
    async with open_replay_server(Reply(frames("a"))) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            async with client.generate_stream_with_response(REQUEST) as (stream, response):
                assert response.value is None
                assert [i async for i in stream] == [Text("a")]
            assert response.value is not None
            assert response.value.finish_reason == "stop"


def test_client_repr_hides_the_key() -> None:
    client = CucaClient(FAKE, api_key="sk-very-secret")
    assert "sk-very-secret" not in repr(client)
    assert "sk-very-secret" not in str(client)


def test_client_local_engine_has_no_adapter() -> None:
    """A local client asked for its wire adapter says it has none, as a settings error."""
    client = CucaClient(ProviderEndpoint.LOCAL)
    with pytest.raises(ConfigurationError, match="the local engine has no provider adapter"):
        client.adapter()


async def test_client_body_exception_is_not_wrapped() -> None:
    async with open_replay_server(Reply.endless(b"data: T x\n\n")) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            with pytest.raises(KeyError):
                async with client.generate_stream(REQUEST) as stream:
                    async for _ in stream:
                        raise KeyError("mine")


async def test_client_plugin_on_request_error_aborts() -> None:
    class Broken(CucaPlugin):
        name = "broken"

        async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
            raise RuntimeError("nope")

    async with open_replay_server(Reply(frames("a"))) as server:
        async with CucaClient(FAKE, base_url=server.url, plugins=[Broken()]) as client:
            with pytest.raises(PluginError) as info:
                await collect(client)
    assert str(info.value) == "plugin error (broken): on_request failed: RuntimeError: nope"
    assert server.requests == []


async def test_client_server_that_goes_on_after_its_end_marker_is_hung_up_on() -> None:
    """[DONE], then the server keeps sending forever: the turn still ends, cleanly."""
    async with open_replay_server(Reply.endless(frames("a"))) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            with trio.fail_after(30):  # a guard against a hang, not a measure
                items = await collect(client)
            await server.wait_connections_closed()
    assert items == [Text("a")]
