"""The replay server of `cuca.testing`, driven by real clients over loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples

import cuca.testing
from cuca.testing import RecordedRequest, Reply, chunk_sizes, open_replay_server

FRAME = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
SSE = FRAME * 5 + b"data: [DONE]\n\n"
GUARD = 5.0  # seconds: a generous bound for anything that should happen at once


async def raw_exchange(url_port: int, request: bytes) -> bytes:
    """Send `request` on a fresh socket and read until the server closes it."""
    stream = await trio.open_tcp_stream("127.0.0.1", url_port)
    async with stream:
        await stream.send_all(request)
        received = bytearray()
        with trio.fail_after(GUARD):
            while data := await stream.receive_some(65536):
                received += data
    return bytes(received)


def decode_chunked(response: bytes) -> tuple[bytes, list[bytes]]:
    """Split a raw chunked HTTP/1.1 response into its head and its chunk payloads."""
    head, _, rest = response.partition(b"\r\n\r\n")
    chunks: list[bytes] = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert rest == b"\r\n"
            return head, chunks
        chunks.append(rest[:size])
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]


GET_AND_CLOSE = b"GET /stream HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"


async def test_testing_replay_streams_body_byte_exact() -> None:
    body = bytes(range(256)) * 1000
    async with open_replay_server(Reply(body, chunks=[1, 2, 3])) as server:
        async with httpx.AsyncClient() as client:
            response = await client.get(server.url)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.content == body


async def test_testing_replay_chunk_boundaries_on_the_wire() -> None:
    reply = Reply(SSE, chunks=[1, 7, 20, 3])
    async with open_replay_server(reply) as server:
        head, chunks = decode_chunked(await raw_exchange(server.port, GET_AND_CLOSE))
    assert b"transfer-encoding: chunked" in head.lower()
    assert [len(chunk) for chunk in chunks] == [1, 7, 20, 3, len(SSE) - 31]
    assert b"".join(chunks) == SSE


@settings(max_examples=examples(25), deadline=None)
@given(body=st.binary(max_size=300), data=st.data())
async def test_testing_replay_any_chunk_sizes_on_the_wire(
    body: bytes, data: st.DataObject
) -> None:
    sizes = data.draw(chunk_sizes(len(body)))
    async with open_replay_server(Reply(body, chunks=sizes)) as server:
        _, chunks = decode_chunked(await raw_exchange(server.port, GET_AND_CLOSE))
    assert [len(chunk) for chunk in chunks] == sizes
    assert b"".join(chunks) == body


async def test_testing_replay_content_length_reply_is_not_chunked() -> None:
    reply = Reply(b'{"ok": true}', headers={"content-type": "application/json",
                                             "content-length": "12"})
    async with open_replay_server(reply) as server:
        response = await raw_exchange(server.port, GET_AND_CLOSE)
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"content-length: 12" in head.lower()
    assert b"chunked" not in head.lower()
    assert body == b'{"ok": true}'


async def test_testing_replay_paces_writes() -> None:
    reply = Reply(SSE, chunks=[10, 10, 10], delay=0.05)  # four writes, three pauses
    async with open_replay_server(reply) as server:
        started = time.monotonic()
        _, chunks = decode_chunked(await raw_exchange(server.port, GET_AND_CLOSE))
        elapsed = time.monotonic() - started
    assert b"".join(chunks) == SSE
    assert elapsed >= 0.15


async def test_testing_replay_keeps_connection_alive() -> None:
    async with open_replay_server(Reply(SSE)) as server:
        async with httpx.AsyncClient() as client:
            first = await client.get(server.url + "/a")
            second = await client.post(server.url + "/b", content=b"x")
        with trio.fail_after(GUARD):
            await server.wait_connections_closed()
    assert first.content == second.content == SSE
    assert [request.path for request in server.requests] == ["/a", "/b"]
    assert server.connections_opened == server.connections_closed == 1


async def test_testing_replay_many_replies_share_one_connection() -> None:
    json_reply = Reply(b"{}", headers={"content-type": "application/json", "content-length": "2"})
    replies = [Reply(SSE, chunks=[3]), json_reply, Reply(b"oops", status=500), Reply(SSE)]
    async with open_replay_server(replies) as server:
        async with httpx.AsyncClient() as client:
            responses = [await client.get(server.url) for _ in range(10)]
    assert [response.status_code for response in responses[:4]] == [200, 200, 500, 200]
    assert responses[-1].content == SSE
    assert server.connections_opened == 1
    assert len(server.requests) == 10


async def test_testing_replay_closes_when_client_asks() -> None:
    async with open_replay_server(Reply(SSE)) as server:
        await raw_exchange(server.port, GET_AND_CLOSE)
        with trio.fail_after(GUARD):
            await server.wait_connections_closed()
        assert server.connections_closed == 1


async def test_testing_replay_records_requests() -> None:
    async with open_replay_server(Reply(SSE)) as server:
        async with httpx.AsyncClient() as client:
            await client.post(
                server.url + "/v1/chat/completions?alt=sse",
                json={"model": "m", "stream": True},
                headers={"Authorization": "Bearer k", "X-Trace": "1"},
            )
    (request,) = server.requests
    assert isinstance(request, RecordedRequest)
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions?alt=sse"
    assert request.headers["authorization"] == "Bearer k"
    assert request.headers["x-trace"] == "1"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {"model": "m", "stream": True}


async def test_testing_replay_answers_in_order_then_repeats_last() -> None:
    replies = [Reply(b"one"), Reply(b"two")]
    async with open_replay_server(replies) as server:
        async with httpx.AsyncClient() as client:
            bodies = [(await client.get(server.url)).content for _ in range(3)]
    assert bodies == [b"one", b"two", b"two"]


async def test_testing_replay_reply_function_sees_the_request() -> None:
    def echo_path(request: RecordedRequest) -> Reply:
        return Reply(request.path.encode())

    async with open_replay_server(echo_path) as server:
        async with httpx.AsyncClient() as client:
            response = await client.get(server.url + "/echo?q=1")
    assert response.content == b"/echo?q=1"


async def test_testing_replay_error_status_with_body() -> None:
    error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}
    reply = Reply(json.dumps(error).encode(), status=429,
                  headers=[("content-type", "application/json"), ("retry-after", "2")])
    async with open_replay_server(reply) as server:
        async with httpx.AsyncClient() as client:
            response = await client.post(server.url + "/v1/chat/completions", json={})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    assert response.json() == error


async def test_testing_replay_stall_times_out_the_reader() -> None:
    async with open_replay_server(Reply(SSE, stall_after=20)) as server:
        async with httpx.AsyncClient(timeout=httpx.Timeout(GUARD, read=0.5)) as client:
            received = bytearray()
            async with client.stream("GET", server.url) as response:
                with pytest.raises(httpx.ReadTimeout):
                    async for data in response.aiter_raw():
                        received += data
        assert received == SSE[:20]
        with trio.fail_after(GUARD):
            await server.wait_connections_closed()


@pytest.mark.parametrize(
    "headers",
    [{"content-type": "text/event-stream"},
     {"content-type": "text/event-stream", "content-length": str(len(SSE))}],
    ids=["chunked", "content-length"],
)
async def test_testing_replay_cut_mid_frame_is_an_incomplete_message(
    headers: dict[str, str],
) -> None:
    async with open_replay_server(Reply(SSE, headers=headers, cut_after=25)) as server:
        async with httpx.AsyncClient() as client:
            received = bytearray()
            async with client.stream("GET", server.url) as response:
                with pytest.raises(httpx.RemoteProtocolError):
                    async for data in response.aiter_raw():
                        received += data
    assert received == SSE[:25]
    assert server.connections_closed == 1


async def test_testing_replay_cut_after_whole_body_withholds_the_end() -> None:
    async with open_replay_server(Reply(SSE, cut_after=len(SSE))) as server:
        response = await raw_exchange(server.port, b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
    assert response.endswith(SSE + b"\r\n")
    assert not response.endswith(b"0\r\n\r\n")


async def test_testing_replay_endless_stream_repeats_the_frame() -> None:
    async with open_replay_server(Reply.endless(FRAME, delay=0.001)) as server:
        async with httpx.AsyncClient() as client:
            received = bytearray()
            async with client.stream("GET", server.url) as response:
                async for data in response.aiter_raw():
                    received += data
                    if len(received) >= 10 * len(FRAME):
                        break
    assert bytes(received[: 10 * len(FRAME)]) == FRAME * 10


async def test_testing_replay_sees_client_hang_up_mid_stream() -> None:
    async with open_replay_server(Reply.endless(FRAME)) as server:
        async with httpx.AsyncClient() as client:
            async with client.stream("GET", server.url) as response:
                async for _ in response.aiter_raw():
                    break
            with trio.fail_after(GUARD):
                await server.wait_connections_closed()
    assert server.connections_opened == server.connections_closed == 1


async def test_testing_replay_sees_client_hang_up_during_stall() -> None:
    async with open_replay_server(Reply(SSE, stall_after=0)) as server:
        async with httpx.AsyncClient() as client:
            async with client.stream("GET", server.url) as response:
                assert response.status_code == 200
            with trio.fail_after(GUARD):
                await server.wait_connections_closed()
    assert server.open_connections == 0


async def test_testing_replay_leaves_no_task_behind() -> None:
    task = trio.lowlevel.current_task()
    nurseries_before = list(task.child_nurseries)
    async with open_replay_server(Reply(SSE, stall_after=0)) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await stream.send_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
        await stream.receive_some(65536)  # the head; the body stalls
        assert server.open_connections == 1
    assert task.child_nurseries == nurseries_before
    assert server.open_connections == 0
    async with stream:
        with trio.fail_after(GUARD):
            await _read_until_closed(stream)
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", server.port)


async def _read_until_closed(stream: trio.SocketStream) -> None:
    """Read until end of stream or a reset: either way the server closed the socket."""
    try:
        while await stream.receive_some(65536):
            pass
    except trio.BrokenResourceError:
        pass


async def test_testing_replay_outer_cancellation_closes_everything() -> None:
    with trio.CancelScope() as scope:
        async with open_replay_server(Reply.endless(FRAME)) as server:
            async with httpx.AsyncClient() as client:
                async with client.stream("GET", server.url) as response:
                    async for _ in response.aiter_raw():
                        scope.cancel()  # from outside the server, mid-stream
    assert scope.cancelled_caught
    assert server.connections_opened == server.connections_closed == 1


async def test_testing_replay_body_error_is_not_wrapped() -> None:
    with pytest.raises(KeyError):
        async with open_replay_server(Reply(SSE)):
            raise KeyError("from the test body")


async def test_testing_replay_failing_reply_function_fails_loudly() -> None:
    def broken(request: RecordedRequest) -> Reply:
        raise RuntimeError("no reply scripted")

    with pytest.raises(BaseExceptionGroup) as info:
        async with open_replay_server(broken) as server:
            async with httpx.AsyncClient() as client:
                await client.get(server.url)
    # the server's error always reaches the test; the client's disconnect may too, when it
    # failed before the server's failure cancelled it (both are kept: cuca/_nursery.py)
    leaves = _leaves(info.value)
    assert [str(e) for e in leaves if isinstance(e, RuntimeError)] == ["no reply scripted"]
    assert all(isinstance(e, RuntimeError | httpx.TransportError) for e in leaves)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


@pytest.mark.parametrize(
    "make",
    [
        lambda: Reply(chunks=[1, 0]),
        lambda: Reply(delay=-1),
        lambda: Reply(stall_after=-1),
        lambda: Reply(status=99),
        lambda: Reply(b"abc", headers={"content-length": "2"}),
        lambda: Reply.endless(b""),
    ],
    ids=["zero-chunk", "negative-delay", "negative-stall", "status", "content-length",
         "empty-frame"],
)
def test_testing_reply_refuses_invalid_replies(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


async def test_testing_replay_refuses_empty_script() -> None:
    with pytest.raises(TypeError):
        async with open_replay_server([]):
            pass


def test_testing_exports_public_surface() -> None:
    public = {name for name in dir(cuca.testing) if not name.startswith("_")}
    public -= {"conformance"}  # the kit's subpackage, once any test imported it
    assert public == {
        "Feedable", "RecordedRequest", "ReplayServer", "Replies", "Reply", "chunk_sizes",
        "chunkings", "feed_chunks", "logged_reply", "open_replay_server", "split_points",
        # the scripted replies (issue 35 §5)
        "Script", "ScriptExhausted", "ScriptedError", "ScriptedServer", "ScriptedTurn",
        "open_scripted_server",
    }
    for name in public:
        assert getattr(cuca.testing, name) is not None


def test_testing_imports_without_hypothesis() -> None:
    script = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "import cuca.testing\n"
        "assert cuca.testing.Reply and cuca.testing.open_replay_server\n"
        "try:\n"
        "    cuca.testing.chunkings\n"
        "except ImportError as exc:\n"
        "    assert 'cuca[testing]' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('chunkings imported without Hypothesis')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
