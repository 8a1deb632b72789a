"""What the replay server answers (`Reply`), what it heard (`RecordedRequest`), and the plan
that turns a `Reply` into the successive writes of a response body.

Everything here is I/O-free: `body_writes` is a plain generator, so the way a reply is cut
into writes can be reasoned about (and tested) without a socket.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

#: Size of one socket write when pacing does not matter (``delay == 0``): large enough that
#: 20,000 small frames go out in a few dozen system calls.
WRITE_SIZE = 64 * 1024

HeaderPairs = tuple[tuple[str, str], ...]
HeadersLike = Mapping[str, str] | Iterable[tuple[str, str]]

_SSE_HEADERS: HeaderPairs = (("content-type", "text/event-stream"),)


def _header_pairs(headers: HeadersLike) -> HeaderPairs:
    """Accept a mapping or an iterable of pairs; keep order and repeated names."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(name), str(value)) for name, value in pairs)


def _optional_sizes(sizes: Iterable[int] | None) -> tuple[int, ...] | None:
    """Freeze `chunks` into a tuple so that a `Reply` stays hashable."""
    return None if sizes is None else tuple(sizes)


def _positive_sizes(_reply: Reply, attribute: attrs.Attribute[Any], sizes: Any) -> None:
    """A write of zero bytes would be invisible on the wire, so it is refused."""
    if sizes is not None and any(size < 1 for size in sizes):
        raise ValueError(f"every size in {attribute.name} must be at least 1, got {sizes!r}")


_non_negative = attrs.validators.ge(0)
_optional_non_negative = attrs.validators.optional(_non_negative)
_status_code = attrs.validators.and_(attrs.validators.ge(200), attrs.validators.le(599))


@attrs.frozen
class Reply:
    """How the replay server answers one request.

    The body goes out in successive writes: first one write per size in `chunks`, then the
    rest (in writes of up to 64 KiB when `delay` is 0, otherwise as one write, or one frame
    per write when `repeat` is set). `delay` seconds pass between two body writes.

    A reply with `stall_after` or `cut_after` never completes: once that many body bytes are
    out (or the whole body, if it is shorter), the server stops sending but keeps the socket
    open (stall), or closes the socket without ending the message (cut). When both are set,
    the smaller one wins.

    The body is sent with ``Transfer-Encoding: chunked`` unless `headers` carry a
    ``content-length``, which must then equal ``len(body)``; a cut then shows up to the client
    as a body shorter than announced. A `headers` value replaces the default
    ``content-type: text/event-stream`` entirely.
    """

    body: bytes = b""
    status: int = attrs.field(default=200, validator=_status_code)
    headers: HeaderPairs = attrs.field(default=_SSE_HEADERS, converter=_header_pairs)
    chunks: tuple[int, ...] | None = attrs.field(
        default=None, converter=_optional_sizes, validator=_positive_sizes
    )
    delay: float = attrs.field(default=0.0, validator=attrs.validators.ge(0.0))
    stall_after: int | None = attrs.field(default=None, validator=_optional_non_negative)
    cut_after: int | None = attrs.field(default=None, validator=_optional_non_negative)
    repeat: bool = False
    """Send `body` again and again, forever (an endless stream); see `Reply.endless`."""

    def __attrs_post_init__(self) -> None:
        """Refuse combinations the wire cannot carry, at construction rather than mid-test."""
        length = self.content_length
        if self.repeat and not self.body:
            raise ValueError("an endless reply needs a non-empty frame to repeat")
        if length is not None and (self.repeat or length != len(self.body)):
            raise ValueError(
                f"content-length {length} does not match the body ({len(self.body)} bytes); "
                "use cut_after to send a short body"
            )

    @classmethod
    def endless(
        cls,
        frame: bytes,
        *,
        delay: float = 0.0,
        status: int = 200,
        headers: HeadersLike = _SSE_HEADERS,
    ) -> Reply:
        """A stream that repeats `frame` forever, `delay` seconds apart (for cancellation tests).

        With ``delay=0`` the frames go out as fast as the client reads them.
        """
        return cls(body=frame, status=status, headers=headers, delay=delay, repeat=True)

    @property
    def content_length(self) -> int | None:
        """The ``content-length`` header as a number, or None when the body is chunked."""
        for name, value in self.headers:
            if name.lower() == "content-length":
                return int(value)
        return None

    @property
    def limit(self) -> int | None:
        """How many body bytes go out before a stall or a cut; None for a complete reply."""
        limits = [n for n in (self.stall_after, self.cut_after) if n is not None]
        return min(limits) if limits else None

    @property
    def cuts(self) -> bool:
        """True when the reply ends by closing the connection mid-message."""
        return self.cut_after is not None and self.cut_after == self.limit


@attrs.frozen
class RecordedRequest:
    """One request as the replay server received it.

    `path` is the request target, query string included; `headers` has lower-case names
    (a repeated header is joined with ``", "``).
    """

    method: str
    path: str
    headers: dict[str, str] = attrs.field(hash=False)
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


def body_writes(reply: Reply) -> Iterator[bytes]:
    """The body of `reply` as the server writes it: a sequence of non-empty byte strings."""
    pieces = itertools.repeat(reply.body) if reply.repeat else iter((reply.body,))
    rest_size = WRITE_SIZE if reply.delay == 0 else None
    return _truncate(_regroup(pieces, reply.chunks or (), rest_size), reply.limit)


def _regroup(
    pieces: Iterator[bytes], sizes: Sequence[int], rest_size: int | None
) -> Iterator[bytes]:
    """Cut the byte stream `pieces` into writes of `sizes`, then of `rest_size` bytes each.

    When `rest_size` is None (paced replies), the rest goes out one piece per write, so that
    an endless stream sends one frame per write.
    """
    buffer = bytearray()

    def take(size: int) -> bytes:
        while len(buffer) < size and (piece := next(pieces, None)) is not None:
            buffer.extend(piece)
        head = bytes(buffer[:size])
        del buffer[:size]
        return head

    for size in sizes:
        if not (write := take(size)):
            return
        yield write
    if rest_size is None:
        yield from (write for write in itertools.chain((bytes(buffer),), pieces) if write)
        return
    while write := take(rest_size):
        yield write


def _truncate(writes: Iterator[bytes], limit: int | None) -> Iterator[bytes]:
    """Stop the writes after `limit` bytes in total (the last write is shortened)."""
    if limit is None:
        yield from writes
        return
    left = limit
    while left > 0 and (write := next(writes, None)) is not None:
        yield write[:left]
        left -= len(write)
