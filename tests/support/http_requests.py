"""Read an HTTP/1.1 request off a raw trio socket, for servers written by hand in the
tests (ones that misbehave in ways the replay server does not)."""

from __future__ import annotations

import trio


async def read_request(stream: trio.SocketStream) -> bytes | None:
    """One whole request (its head, then its Content-Length body) from ``stream``; its
    head is returned, or ``None`` when the client closed before sending one."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        body += chunk
    return head
