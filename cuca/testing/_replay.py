"""The replay server: HTTP/1.1 on loopback that answers each request with a scripted `Reply`.

One task per connection speaks HTTP through `h11` (keep-alive included). While a reply goes
out, a second task keeps reading the socket, so that a client that hangs up mid-stream (or
during a stall) is noticed at once and its connection counted as closed.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from http import HTTPStatus

import h11
import trio

from cuca._nursery import background_nursery

from ._reply import WRITE_SIZE, RecordedRequest, Reply, body_writes

#: What `open_replay_server` accepts: one reply for every request, one reply per request in
#: order (the last one repeats), or a function choosing the reply from the request.
Replies = Reply | Sequence[Reply] | Callable[[RecordedRequest], Reply]

_READ_SIZE = 64 * 1024


class ReplayServer:
    """A running replay server, as yielded by `open_replay_server`.

    The counters are live: they change as clients connect, send and hang up.
    """

    def __init__(self, port: int, choose: Callable[[int, RecordedRequest], Reply]) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._choose = choose
        self._requests: list[RecordedRequest] = []
        self._opened = 0
        self._closed = 0
        self._lot = trio.lowlevel.ParkingLot()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        return list(self._requests)

    @property
    def connections_opened(self) -> int:
        """How many connections have been accepted."""
        return self._opened

    @property
    def connections_closed(self) -> int:
        """How many connections have ended, closed by the client or by the server."""
        return self._closed

    @property
    def open_connections(self) -> int:
        """How many connections are open right now."""
        return self._opened - self._closed

    async def wait_connections_closed(self) -> None:
        """Return once no connection is open (at once if none is).

        An idle keep-alive connection stays open until its client closes it: close the HTTP
        client first, and guard the wait with `trio.fail_after`.
        """
        while self.open_connections:
            await self._lot.park()

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Start a connection task per client, until cancelled.

        (Not `trio.serve_listeners`: its cleanup, if cancelled, would replace the error of a
        crashed connection task with `trio.Cancelled`, and the crash would go unreported.)
        """
        async with listener:
            while True:
                nursery.start_soon(self._serve_connection, await listener.accept())

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        """Answer requests on one connection until either side ends it."""
        self._opened += 1
        try:
            await self._converse(stream, h11.Connection(h11.SERVER))
        except (trio.BrokenResourceError, h11.RemoteProtocolError):
            pass  # the client broke the connection or spoke bad HTTP: it simply ends
        finally:
            with trio.CancelScope(shield=True):  # so that a cancelled server still counts
                await stream.aclose()
            self._closed += 1
            self._lot.unpark_all()

    async def _converse(self, stream: trio.SocketStream, conn: h11.Connection) -> None:
        """Request, reply, and again while the connection stays reusable."""
        while (request := await _receive_request(stream, conn)) is not None:
            self._requests.append(request)
            reply = self._choose(len(self._requests) - 1, request)
            if not await _answer(stream, conn, reply):
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return  # e.g. the client asked for "connection: close"
            conn.start_next_cycle()


@asynccontextmanager
async def open_replay_server(replies: Replies) -> AsyncIterator[ReplayServer]:
    """Serve `replies` over HTTP/1.1 on ``127.0.0.1`` (a free port) for the ``async with``.

    Leaving the block cancels every connection task and closes every socket. An exception
    raised in a connection task (an invalid reply, a reply function that failed) crashes the
    server and ends the block with it, so that a broken test fails loudly.
    """
    choose = _chooser(replies)  # checked before a socket is opened
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    server = ReplayServer(listener.socket.getsockname()[1], choose)
    async with background_nursery() as nursery:
        nursery.start_soon(server._accept, listener, nursery)
        yield server


def _chooser(replies: Replies) -> Callable[[int, RecordedRequest], Reply]:
    """Turn `replies` into a function of (request index, request) -> Reply."""
    if isinstance(replies, Reply):
        return lambda _index, _request: replies
    if callable(replies):
        return lambda _index, request: replies(request)
    script = tuple(replies)
    if not script or not all(isinstance(reply, Reply) for reply in script):
        raise TypeError(
            f"expected a Reply, a non-empty sequence of Replies or a function, got {replies!r}"
        )
    return lambda index, _request: script[min(index, len(script) - 1)]


async def _receive_request(
    stream: trio.SocketStream, conn: h11.Connection
) -> RecordedRequest | None:
    """Read one whole request; None when the client closed the connection between requests."""
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(_READ_SIZE))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and head is not None:
            return _record(head, bytes(body))
        else:
            return None  # ConnectionClosed


def _record(head: h11.Request, body: bytes) -> RecordedRequest:
    """The request as the tests see it: text method, target and lower-case headers."""
    headers: dict[str, str] = {}
    for name, value in head.headers:
        key, text = name.decode("latin-1"), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return RecordedRequest(
        method=head.method.decode("ascii"),
        path=head.target.decode("latin-1"),
        headers=headers,
        body=body,
    )


async def _answer(stream: trio.SocketStream, conn: h11.Connection, reply: Reply) -> bool:
    """Send `reply` while watching for the client to hang up.

    Returns True when the reply went out complete and the client is still there.
    """
    complete = False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_peer, stream, conn, nursery.cancel_scope)
        try:
            complete = await _send_reply(stream, conn, reply)
        except trio.BrokenResourceError:
            pass  # the client is gone; a nursery would wrap the error in a group
        nursery.cancel_scope.cancel()
    return complete


async def _watch_peer(
    stream: trio.SocketStream, conn: h11.Connection, scope: trio.CancelScope
) -> None:
    """Read the socket until the client hangs up, then cancel `scope`.

    Bytes that arrive meanwhile (a pipelined request) are handed to `conn` for later.
    """
    try:
        while data := await stream.receive_some(_READ_SIZE):
            conn.receive_data(data)
    except trio.BrokenResourceError:
        pass
    scope.cancel()


async def _send_reply(stream: trio.SocketStream, conn: h11.Connection, reply: Reply) -> bool:
    """Write the head and the body of `reply`; stall or cut as it says.

    Returns True when the message was completed.
    """
    status = h11.Response(
        status_code=reply.status, headers=list(reply.headers), reason=_reason(reply.status)
    )
    head = _encode(conn, status)
    frames = (_encode(conn, h11.Data(data=write)) for write in body_writes(reply))
    end: Iterable[bytes] = () if reply.limit is not None else _end_of_message(conn)
    if reply.delay:
        await _send_paced(stream, head, frames, reply.delay)
        await _send_batched(stream, end)
    else:
        await _send_batched(stream, itertools.chain((head,), frames, end))
    if reply.limit is None:
        return True
    if not reply.cuts:
        await trio.sleep_forever()
    return False


def _reason(status: int) -> bytes:
    """The standard reason phrase ("Too Many Requests"), or none for an unknown status."""
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _end_of_message(conn: h11.Connection) -> Iterator[bytes]:
    """The end of the message, encoded only when reached (h11 checks the order)."""
    yield _encode(conn, h11.EndOfMessage())


def _encode(conn: h11.Connection, event: h11.Event) -> bytes:
    """The bytes h11 makes of `event` (only ConnectionClosed, never sent here, makes None)."""
    return conn.send(event) or b""


async def _send_batched(stream: trio.SocketStream, blobs: Iterable[bytes]) -> None:
    """Write `blobs` in as few system calls as possible (batches of about 64 KiB)."""
    batch = bytearray()
    for blob in blobs:
        batch += blob
        if len(batch) >= WRITE_SIZE:
            await stream.send_all(batch)
            batch = bytearray()
    if batch:
        await stream.send_all(batch)


async def _send_paced(
    stream: trio.SocketStream, head: bytes, frames: Iterable[bytes], delay: float
) -> None:
    """Write the head, then each body frame on its own, `delay` seconds apart."""
    await stream.send_all(head)
    for index, frame in enumerate(frames):
        if index:
            await trio.sleep(delay)
        await stream.send_all(frame)
