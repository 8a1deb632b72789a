"""The server-sent events parser (sans-IO): bytes in, events out.

:class:`SseParser` follows the WHATWG event-stream rules (HTML §9.2.5-9.2.6; the summary
and the edge cases are in ``reference/wire.md`` §10): CR, LF and CRLF end lines, one
leading BOM is dropped, ``:`` lines are comments, ``data`` lines are joined with LF, a
block without data dispatches nothing, the last event id persists, and an event that
is not ended by a blank line before end of stream is discarded.

Two paths give the same events. The fast path takes a run of complete frames that are
each a single ``data: `` line with LF endings (the shape of every OpenAI-compatible
stream), cuts it at the frame joints and decodes and builds the events in C loops.
Everything else is decoded a run of lines at a time and goes line by line through the
state machine. Only the unterminated last line of a chunk is copied into
the parser's one buffer, so memory stays at one line, whatever the read size.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from itertools import repeat

import attrs

from cuca.errors import SseParseError

STRAY_LINE = "\nstray"
"""The event type of a stray line returned with ``keep_stray_lines=True``."""

__all__ = ["STRAY_LINE", "SseEvent", "SseParser", "sse_events"]

_BOM = b"\xef\xbb\xbf"
_INITIAL_CAPACITY = 8192
_LF = 0x0A
_CR = 0x0D
# Between two single-line ``data: `` frames, and nowhere else in a fast-path run.
_FRAME_JOINT = b"\n\ndata: "
_FIELDS = frozenset({"data", "event", "id", "retry"})


@attrs.frozen(slots=True)
class SseEvent:
    """One dispatched event: its ``data`` (data lines joined with LF), its ``event``
    type ("message" when unset), the last event ``id`` seen so far, and ``retry``."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SseParser:
    """Turn the bytes of one event stream into :class:`SseEvent` values, h11 style.

    Call :meth:`feed` with each chunk as it arrives and :meth:`close` at end of stream.
    ``id`` and ``retry`` persist across events, as the spec's last event id and
    reconnection time do: each event carries the values in force when it was
    dispatched. A completed line that is not UTF-8 raises :class:`SseParseError`;
    events completed before that line in the same chunk are returned first, and the
    error is raised by the next call (the parser stays broken).

    With ``keep_stray_lines=True`` each line that is neither a comment nor a ``data``,
    ``event``, ``id`` or ``retry`` field is also returned, in stream order, as
    ``SseEvent(data=line, event=STRAY_LINE)`` (a type no server can send, since it
    holds a line feed); Gemini appends its errors as raw JSON lines after the last
    event, and their position among the events matters.
    """

    __slots__ = (
        "_at_start",
        "_buf",
        "_data",
        "_error",
        "_event",
        "_fed",
        "_id",
        "_keep_stray",
        "_len",
        "_line_start",
        "_retry",
        "_skip_lf",
        "_spill",
    )

    def __init__(self, *, keep_stray_lines: bool = False) -> None:
        self._keep_stray = keep_stray_lines
        self._buf = bytearray(_INITIAL_CAPACITY)  # the partial last line, reused
        self._len = 0  # bytes of the partial line: in ``_buf``, then in ``_spill``
        self._spill: list[bytes] = []  # the rest of a line longer than ``_buf``
        self._line_start = 0  # stream offset of ``_buf[0]``
        self._fed = 0  # stream offset of the chunk being fed
        self._at_start = True  # the leading BOM is not settled yet
        self._skip_lf = False  # the last chunk ended with CR: a leading LF ends nothing
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._error: str | None = None

    @property
    def buffer_high_water(self) -> int:
        """Capacity of the line buffer in bytes: 8192, or the longest line it has held,
        which is at most the largest single frame plus one partial line (seed 002). The
        buffer never shrinks, and it is allocated to the byte (a line longer than the
        buffer is kept in pieces until it ends, then copied once into a buffer of its
        size), so no growth step is kept behind it: ``bytearray.__alloc__()`` is this
        plus CPython's one terminating byte."""
        return len(self._buf)

    @property
    def last_event_id(self) -> str | None:
        """The last event id set by the stream, to send back as ``Last-Event-ID``."""
        return self._id

    def feed(self, data: bytes) -> list[SseEvent]:
        """Parse the next chunk of the stream and return the events it completed."""
        if self._error is not None:
            raise SseParseError(self._error)
        if type(data) is not bytes:
            data = bytes(data)  # a bytearray or memoryview from the caller
        events: list[SseEvent] = []
        # A read of whole ``data: `` frames at a frame boundary, the common case, goes
        # straight to the fast path; anything else takes the long way.
        at_boundary = not (self._len or self._skip_lf or self._at_start or self._data)
        if not (
            at_boundary
            and not self._event
            and data.endswith(b"\n\n")
            and self._parse_frames(data, 0, len(data), events)
        ):
            self._feed_any(data, events)
        self._fed += len(data)
        if self._error is not None and not events:
            raise SseParseError(self._error)
        return events

    def _feed_any(self, data: bytes, events: list[SseEvent]) -> None:
        """Parse any chunk: settle the BOM, finish the partial line, then the rest."""
        start = self._settle_bom(data) if self._at_start else 0
        start = self._finish_partial_line(data, start, events)
        if start < len(data) and self._error is None:
            self._feed_lines(data, start, events)

    def close(self) -> list[SseEvent]:
        """End the stream: a pending event without its blank line is discarded.

        Returns the events still due, which the spec makes always none. The last event
        id and retry are kept, so the parser can read the stream of a reconnection.
        """
        self._raise_if_broken()
        tail: list[SseEvent] = []
        if self._keep_stray and self._len and not self._at_start:
            self._keep_if_stray(self._decode_buffer(), tail)
            self._raise_if_broken()
        self._len = 0
        self._spill = []
        self._fed = 0
        self._data = []
        self._event = ""
        self._skip_lf = False
        self._at_start = True
        return tail

    def _raise_if_broken(self) -> None:
        if self._error is not None:
            raise SseParseError(self._error)

    def _settle_bom(self, data: bytes) -> int:
        """Drop one leading BOM, even split across chunks; return where lines start.

        Until three bytes have arrived the stream start is held in the line buffer.
        """
        head = bytes(self._buf[: self._len]) + data[:3]
        if len(head) < 3 and _BOM.startswith(head):
            self._append(data, 0, len(data))
            return len(data)
        self._at_start = False
        if not head.startswith(_BOM):
            return 0
        held, self._len = self._len, 0
        return 3 - held

    def _finish_partial_line(self, data: bytes, start: int, events: list[SseEvent]) -> int:
        """Complete the buffered partial line (or a pending CRLF) with the start of
        ``data``; return the offset of the first byte after it."""
        if self._skip_lf and start < len(data):
            self._skip_lf = False
            if data[start] == _LF:
                start += 1
        if not self._len or start >= len(data):
            return start
        end = _find_eol(data, start)
        if end < 0:
            self._append(data, start, len(data))
            return len(data)
        self._append(data, start, end)
        line = self._decode_buffer()
        self._len = 0
        if line is not None:
            self._interpret([line], events)
        return self._after_eol(data, end)

    def _after_eol(self, data: bytes, end: int) -> int:
        """Step past the line terminator at ``data[end]``, minding CRLF split by chunks."""
        if data[end] == _CR:
            if end + 1 == len(data):
                self._skip_lf = True
            elif data[end + 1] == _LF:
                end += 1
        return end + 1

    def _feed_lines(self, data: bytes, start: int, events: list[SseEvent]) -> None:
        """Parse the complete lines of ``data[start:]`` and buffer the unterminated rest."""
        stop = max(data.rfind(b"\n", start), data.rfind(b"\r", start)) + 1
        if stop:
            self._skip_lf = stop == len(data) and data[stop - 1] == _CR
            self._parse_region(data, start, stop, events)
        if self._error is None:
            self._append(data, max(start, stop), len(data))

    def _parse_region(self, data: bytes, start: int, stop: int, events: list[SseEvent]) -> None:
        """Parse ``data[start:stop]``, whole lines: reach a frame boundary line by line,
        take the run of complete frames by the fast path if it qualifies, then the rest
        line by line."""
        if self._data or self._event:
            cut = _first_frame_end(data, start, stop)
            self._parse_lines(data, start, cut, events)
            start = cut
        end = data.rfind(b"\n\n", start, stop) + 2
        if end >= start + 2 and self._error is None:
            if self._data or self._event or not self._parse_frames(data, start, end, events):
                self._parse_lines(data, start, end, events)
            start = end
        if start < stop and self._error is None:
            self._parse_lines(data, start, stop, events)

    def _parse_frames(self, data: bytes, start: int, end: int, events: list[SseEvent]) -> bool:
        """The fast path: if ``data[start:end]`` is only frames made of one ``data: ``
        line each, LF-terminated, dispatch them all at once and return True."""
        if not data.startswith(b"data: ", start) or data.find(b"\r", start, end) >= 0:
            return False
        body = data[start + 6 : end - 2]
        try:
            if b"\n" not in body:  # a single frame
                events.append(_new_event(body.decode(), "message", self._id, self._retry))
                return True
            parts = body.split(_FRAME_JOINT)  # cut at the joints, then no LF may be left
            if body.count(b"\n") != 2 * (len(parts) - 1):  # an LF outside the joints
                return False
            values = list(map(bytes.decode, parts))
        except UnicodeDecodeError:
            return False
        events += _message_events(values, self._id, self._retry)
        return True

    def _parse_lines(self, data: bytes, start: int, stop: int, events: list[SseEvent]) -> None:
        """The general path: decode the whole lines of ``data[start:stop]`` at once, split
        them on CR, LF and CRLF only, and interpret them one by one."""
        chunk = data[start:stop]
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            good = max(chunk.rfind(b"\n", 0, exc.start), chunk.rfind(b"\r", 0, exc.start)) + 1
            self._fail(self._fed + start + exc.start)
            text = chunk[:good].decode("utf-8")
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        lines.pop()  # the text ends with a terminator, or is empty
        self._interpret(lines, events)

    def _interpret(self, lines: list[str], events: list[SseEvent]) -> None:
        """Apply the WHATWG field rules to whole lines (the hot loop of the slow path).

        ``data`` and ``event`` lines, the common ones, are handled inline.
        """
        data, event = self._data, self._event
        for line in lines:
            if not line:
                if data:
                    events.append(
                        SseEvent("\n".join(data), event or "message", self._id, self._retry)
                    )
                    data = self._data = []
                event = ""
            elif line.startswith("data:"):
                data.append(line[6:] if line.startswith(" ", 5) else line[5:])
            elif line.startswith("event:"):
                event = line[7:] if line.startswith(" ", 6) else line[6:]
            elif line[0] != ":":
                self._event = event
                self._take_field(line, events)
                event = self._event
        self._event = event

    def _take_field(self, line: str, events: list[SseEvent]) -> None:
        """Apply one non-comment line other than ``data:...``."""
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        elif self._keep_stray:
            events.append(SseEvent(line, STRAY_LINE, self._id, self._retry))

    def _keep_if_stray(self, line: str | None, events: list[SseEvent]) -> None:
        """At end of stream, return the unterminated last line if it is a stray line."""
        if line and line[0] != ":" and line.partition(":")[0] not in _FIELDS:
            events.append(SseEvent(line, STRAY_LINE, self._id, self._retry))

    def _append(self, data: bytes, start: int, end: int) -> None:
        """Copy ``data[start:end]`` to the end of the line buffer, growing it if needed."""
        if end <= start:
            return
        if not self._len:
            self._line_start = self._fed + start
        need = self._len + end - start
        if self._spill or need > len(self._buf):
            # past the buffer: keep the piece, and copy the whole line once it ends into a
            # buffer of exactly its size (seed 002: the high-water mark is the largest
            # single frame plus one partial line; growing the bytearray read by read
            # would keep CPython's growth step, up to an eighth, allocated behind it)
            self._spill.append(data[start:end])
        else:
            self._buf[self._len : need] = memoryview(data)[start:end]
        self._len = need

    def _gather(self) -> None:
        """Move the spilled pieces of the line into the buffer, grown to the line's size
        when it is longer (one allocation and one copy per long line)."""
        held = self._len - sum(len(piece) for piece in self._spill)
        if self._len > len(self._buf):
            grown = bytearray(self._len)
            grown[:held] = memoryview(self._buf)[:held]
            self._buf = grown
        at = held
        for piece in self._spill:
            self._buf[at : at + len(piece)] = piece
            at += len(piece)
        self._spill = []

    def _decode_buffer(self) -> str | None:
        """Decode the buffered line; on invalid UTF-8 record the error, return None."""
        if self._spill:
            self._gather()
        try:
            return self._buf[: self._len].decode("utf-8")
        except UnicodeDecodeError as exc:
            self._fail(self._line_start + exc.start)
            return None

    def _fail(self, offset: int) -> None:
        self._error = f"invalid UTF-8 in event stream at byte {offset}"


_new = object.__new__
_set_data, _set_event, _set_id, _set_retry = (
    SseEvent.__dict__[field.name].__set__ for field in attrs.fields(SseEvent)
)
_drain: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend


def _new_event(data: str, event: str, event_id: str | None, retry: int | None) -> SseEvent:
    """``SseEvent(data, event, event_id, retry)``, a third faster.

    Building events is most of the parser's time, and attrs' frozen ``__init__`` goes
    through ``object.__setattr__`` for each field. Filling the slots with their member
    descriptors is equivalent while ``SseEvent`` has no validator, converter or
    ``on_setattr`` hook (a test checks).
    """
    new = _new(SseEvent)
    _set_data(new, data)
    _set_event(new, event)
    _set_id(new, event_id)
    _set_retry(new, retry)
    return new


def _message_events(values: list[str], event_id: str | None, retry: int | None) -> list[SseEvent]:
    """``[SseEvent(value, "message", event_id, retry) for value in values]``, as
    :func:`_new_event` does it but over the whole batch, in C loops."""
    count = len(values)
    events = list(map(_new, repeat(SseEvent, count)))
    _drain(map(_set_data, events, values))
    _drain(map(_set_event, events, repeat("message", count)))
    _drain(map(_set_id, events, repeat(event_id, count)))
    _drain(map(_set_retry, events, repeat(retry, count)))
    return events


def _first_frame_end(data: bytes, start: int, stop: int) -> int:
    """Offset just past the first blank line in ``data[start:stop]`` (a line start),
    or ``stop`` if there is none with LF endings."""
    if data[start] == _LF:
        return start + 1
    blank = data.find(b"\n\n", start, stop)
    return stop if blank < 0 else blank + 2


def _find_eol(data: bytes, start: int) -> int:
    """Offset of the first CR or LF in ``data[start:]``, or -1."""
    lf = data.find(b"\n", start)
    cr = data.find(b"\r", start, lf if lf >= 0 else len(data))
    return cr if cr >= 0 else lf


def sse_events(chunks: Iterable[bytes]) -> list[SseEvent]:
    """Parse a whole stream given as chunks; handy in tests and one-shot replies."""
    parser = SseParser()
    events: list[SseEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.close()
    return events
