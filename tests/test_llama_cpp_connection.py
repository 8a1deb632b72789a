"""llama-server closes the connection after every streamed answer, without saying so.

Its chunk provider calls ``sink.done()`` and then returns false, which cpp-httplib takes
for a failed write: the last chunk goes out, no ``Connection: close`` is sent, and the
socket is closed a moment later (pinned against the real server in
``test_llama_server.py``). A client that put that connection back in its pool sends the
next turn into a socket the server is about to close, unread: the user would see
"Server disconnected without sending a response" on a turn that was never answered,
now and then, whenever the next turn is sent before the server's close arrives.

The server below does what llama-server does, with the close held back long enough
that the next request always lands on the doomed connection. Every streamed llama.cpp
request asks for ``Connection: close`` itself, so httpx never pools it.
"""

from __future__ import annotations

import functools

import pytest
import trio
from support.http_requests import read_request

from cuca import CucaClient, ProviderEndpoint, UnifiedRequest
from cuca.providers.base import ClientSettings
from cuca.providers.chat.family import make_chat
from cuca.providers.llamacpp.encode import LlamaCppConfig, LlamaRoute, make_llama_cpp

CHAT = (
    b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
COMPLETION = b'data: {"content":"Hi","stop":false}\n\ndata: {"content":"","stop":true}\n\n'
REQUEST = UnifiedRequest.new("smollm2").add_user_message("Hi").set_max_tokens(4)


def _chunked(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    head += b"Keep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


@pytest.mark.parametrize("route", [LlamaRoute.CHAT, LlamaRoute.COMPLETION])
async def test_llama_cpp_next_turn_never_lands_on_a_connection_the_server_closes(
    route: LlamaRoute,
) -> None:
    """Three streamed turns back to back, each answered: each went out on a connection of
    its own, asking for the close, and the server never saw a request it did not answer
    (without the header, the second turn fails with a TransportError)."""
    heads: list[bytes] = []
    connections = 0
    body = CHAT if route is LlamaRoute.CHAT else COMPLETION

    async def handler(stream: trio.SocketStream) -> None:
        nonlocal connections
        connections += 1
        head = await read_request(stream)
        if head is None:
            return
        heads.append(head)
        await stream.send_all(_chunked(body))
        # llama-server's close, held back: what the client sends meanwhile is never read
        await trio.sleep(0.3)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        (listener,) = await nursery.start(serve)
        url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
        config = LlamaCppConfig(route=route)
        async with CucaClient(
            ProviderEndpoint.LLAMA_CPP, base_url=url, provider_config=config
        ) as client:
            texts = [(await client.generate(REQUEST)).text for _ in range(3)]
        nursery.cancel_scope.cancel()
    assert texts == ["Hi", "Hi", "Hi"]
    assert len(heads) == connections == 3
    assert all(b"\r\nconnection: close" in head.lower() for head in heads)


@pytest.mark.parametrize("route", list(LlamaRoute))
def test_llama_cpp_streamed_requests_ask_for_the_close(route: LlamaRoute) -> None:
    """Every route's streamed request carries ``Connection: close``; a non-streamed one
    on the chat and Responses routes, which llama-server answers whole and keeps the
    connection after, does not (the completion route always streams)."""
    config = LlamaCppConfig(route=route)
    url = "http://127.0.0.1:8080"
    adapter = make_llama_cpp(ClientSettings(ProviderEndpoint.LLAMA_CPP, url, None, config))
    assert adapter.encode(REQUEST).headers.get("connection") == "close"
    single = adapter.encode(REQUEST.set_stream(False)).headers.get("connection")
    assert single == ("close" if route is LlamaRoute.COMPLETION else None)


def test_openai_requests_keep_their_connection() -> None:
    """Only llama-server's dialect asks for the close: OpenAI's streams stay pooled."""
    settings = ClientSettings(ProviderEndpoint.OPENAI, "https://api.openai.com/v1", api_key="k")
    assert "connection" not in make_chat(settings).encode(REQUEST).headers
