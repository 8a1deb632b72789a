"""Tests for the SSE parser: one test per WHATWG rule, the edge cases of the well-known
suites (``reference/wire.md`` §10.1), memory bounds, and Hypothesis properties that any
chunking gives the events of a plain reference implementation written below."""

from __future__ import annotations

import itertools

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples

from cuca.errors import SseParseError
from cuca.stages.sse import STRAY_LINE, SseEvent, SseParser, sse_events
from cuca.testing import chunkings

BOM = b"\xef\xbb\xbf"


def feed_all(parser: SseParser, chunks: list[bytes]) -> list[SseEvent]:
    events: list[SseEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.close()


def bytewise(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


def split_at(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def parse_every_way(stream: bytes) -> list[SseEvent]:
    """Events of ``stream`` fed whole, byte by byte and cut at every single offset,
    asserting all of them agree."""
    whole = sse_events([stream])
    assert sse_events(bytewise(stream)) == whole
    for cut in range(1, len(stream)):
        assert sse_events([stream[:cut], stream[cut:]]) == whole, cut
    return whole


# The reference: obviously correct, slow. Decode everything, cut lines character by
# character on CR, LF and CRLF, then apply the spec's steps literally.


def reference_lines(text: str) -> list[str]:
    """The complete lines of ``text``; the unterminated tail is dropped."""
    lines: list[str] = []
    current: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "\r\n":
            lines.append("".join(current))
            current = []
            if char == "\r" and text[index + 1 : index + 2] == "\n":
                index += 1
        else:
            current.append(char)
        index += 1
    return lines


def reference_events(stream: bytes) -> list[SseEvent]:
    text = stream.decode("utf-8")
    if text.startswith("\ufeff"):
        text = text[1:]
    events: list[SseEvent] = []
    data, event_type, last_id, retry = "", "", None, None
    for line in reference_lines(text):
        if line == "":
            if data == "":
                event_type = ""
                continue
            if data.endswith("\n"):
                data = data[:-1]
            events.append(SseEvent(data, event_type or "message", last_id, retry))
            data, event_type = "", ""
            continue
        if line.startswith(":"):
            continue
        if ":" in line:
            name, value = line.split(":", 1)
            if value.startswith(" "):
                value = value[1:]
        else:
            name, value = line, ""
        if name == "event":
            event_type = value
        elif name == "data":
            data += value + "\n"
        elif name == "id":
            if "\0" not in value:
                last_id = value
        elif name == "retry":
            if value and all(char in "0123456789" for char in value):
                retry = int(value)
    return events


# Line endings


def test_sse_lf_line_endings() -> None:
    assert parse_every_way(b"data: a\n\ndata: b\n\n") == [SseEvent("a"), SseEvent("b")]


def test_sse_crlf_line_endings() -> None:
    assert parse_every_way(b"data: a\r\n\r\ndata: b\r\n\r\n") == [SseEvent("a"), SseEvent("b")]


def test_sse_cr_line_endings() -> None:
    assert parse_every_way(b"data: a\r\rdata: b\r\r") == [SseEvent("a"), SseEvent("b")]


def test_sse_mixed_line_endings() -> None:
    stream = b"data: a\r\ndata: b\rdata: c\n\r\nevent: x\rdata: d\r\n\n"
    assert parse_every_way(stream) == [SseEvent("a\nb\nc"), SseEvent("d", "x")]


def test_sse_cr_at_chunk_end_then_lf_is_one_terminator() -> None:
    chunks = [b"data: A\r\n", b"data: B\r", b"\n", b"data: C\r\n", b"\n"]
    assert sse_events(chunks) == [SseEvent("A\nB\nC")]


def test_sse_cr_at_chunk_end_then_other_byte_is_a_terminator() -> None:
    assert sse_events([b"data: A\r", b"data: B\r", b"\r"]) == [SseEvent("A\nB")]


def test_sse_lone_cr_chunk_between_lines() -> None:
    assert sse_events([b"data: A", b"\r", b"\n", b"\r", b"\n"]) == [SseEvent("A")]


def test_sse_only_cr_lf_crlf_are_terminators() -> None:
    others = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"
    stream = f"data: a{others}b\n\n".encode()
    assert parse_every_way(stream) == [SseEvent(f"a{others}b")]


def test_sse_consecutive_cr_is_a_blank_line() -> None:
    assert parse_every_way(b"data: line1\r\rdata: line2\r\r") == [
        SseEvent("line1"),
        SseEvent("line2"),
    ]


def test_sse_lf_cr_lf_cr_is_three_line_ends() -> None:
    # "data: a" ends at LF, CRLF is a blank line, the last CR another blank line.
    assert parse_every_way(b"data: a\n\r\ndata: b\n\r") == [SseEvent("a"), SseEvent("b")]


# Byte order mark


def test_sse_leading_bom_is_ignored() -> None:
    assert parse_every_way(BOM + b"data: x\n\n") == [SseEvent("x")]


def test_sse_leading_bom_split_across_chunks() -> None:
    stream = BOM + b"data: x\n\n"
    for first in range(4):
        for second in range(first, 4):
            chunks = split_at(stream, [first, second])
            assert sse_events(chunks) == [SseEvent("x")], chunks


def test_sse_bom_alone_in_tiny_chunks() -> None:
    assert sse_events([b"", b"\xef", b"", b"\xbb", b"\xbf", b"data: x\n\n"]) == [SseEvent("x")]


def test_sse_only_one_bom_is_ignored() -> None:
    # The second BOM belongs to the first line: its field name is "\ufeffdata".
    assert parse_every_way(BOM + BOM + b"data: x\n\ndata: y\n\n") == [SseEvent("y")]


def test_sse_bom_after_the_start_is_data() -> None:
    stream = b"data: a\n\n" + BOM + b"data: b\n\ndata: " + BOM + b"c\n\n"
    assert parse_every_way(stream) == [SseEvent("a"), SseEvent("\ufeffc")]


def test_sse_partial_bom_prefix_then_other_bytes() -> None:
    with pytest.raises(SseParseError, match=r"at byte 0$"):
        sse_events([b"\xef\xbb", b"data: x\n\n"])


# Comments and fields


def test_sse_comments_are_ignored() -> None:
    stream = b": keep-alive\n:\n: OPENROUTER PROCESSING\ndata: a\n: data:fail\n:\0nul\n\n"
    assert parse_every_way(stream) == [SseEvent("a")]


def test_sse_comment_only_block_dispatches_nothing() -> None:
    assert parse_every_way(b":\n\n: ping\n\n") == []


def test_sse_300_colons_comment() -> None:
    stream = b":" * 300 + b"\ndata: ok\n\n"
    assert parse_every_way(stream) == [SseEvent("ok")]


def test_sse_long_comment_split_across_chunks() -> None:
    stream = b": " + b"x" * 2048 + b"\ndata: ok\n\n"
    chunks = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    assert sse_events(chunks) == [SseEvent("ok")]


def test_sse_field_without_colon_has_empty_value() -> None:
    assert parse_every_way(b"data\n\n") == [SseEvent("")]
    assert parse_every_way(b"data\ndata\n\n") == [SseEvent("\n")]
    assert parse_every_way(b"event\ndata: x\n\n") == [SseEvent("x")]


def test_sse_exactly_one_leading_space_is_stripped() -> None:
    stream = b"data:no space\n\ndata: one\n\ndata:  two\n\nevent:  e\ndata:x\n\n"
    assert parse_every_way(stream) == [
        SseEvent("no space"),
        SseEvent("one"),
        SseEvent(" two"),
        SseEvent("x", " e"),
    ]


def test_sse_trailing_whitespace_is_preserved() -> None:
    assert parse_every_way(b"data: a \t\n\n") == [SseEvent("a \t")]


def test_sse_value_keeps_later_colons() -> None:
    assert parse_every_way(b"data: a: b:c\n\n") == [SseEvent("a: b:c")]


def test_sse_data_lines_are_joined_with_lf() -> None:
    assert parse_every_way(b"data: a\ndata:\ndata: b\n\n") == [SseEvent("a\n\nb")]


def test_sse_empty_data_field_dispatches_empty_string() -> None:
    assert parse_every_way(b"data:\n\n") == [SseEvent("")]


def test_sse_nul_in_data_is_kept() -> None:
    assert parse_every_way(b"data: a\0b\n\n") == [SseEvent("a\0b")]


def test_sse_event_field_sets_the_type() -> None:
    assert parse_every_way(b"event: delta\ndata: x\n\n") == [SseEvent("x", "delta")]


def test_sse_empty_event_field_resets_to_message() -> None:
    assert parse_every_way(b"event: delta\nevent:\ndata: x\n\n") == [SseEvent("x")]


def test_sse_event_type_resets_after_dispatch() -> None:
    stream = b"event: delta\ndata: x\n\ndata: y\n\n"
    assert parse_every_way(stream) == [SseEvent("x", "delta"), SseEvent("y")]


def test_sse_field_names_are_case_sensitive() -> None:
    assert parse_every_way(b"DATA: x\nData: y\n\ndata: z\n\n") == [SseEvent("z")]


def test_sse_unknown_fields_are_ignored() -> None:
    assert parse_every_way(b"foo: bar\ndata: x\nretry2: 1\n\n") == [SseEvent("x")]


# id and retry


def test_sse_id_containing_nul_is_ignored() -> None:
    stream = b"id: 123\nid: bad\0id\ndata: hello\n\n"
    assert parse_every_way(stream) == [SseEvent("hello", id="123")]


def test_sse_last_event_id_persists_across_events() -> None:
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\n"
    assert parse_every_way(stream) == [
        SseEvent("a", id="1"),
        SseEvent("b", id="1"),
        SseEvent("c", id="2"),
    ]


def test_sse_id_only_block_updates_the_id_without_an_event() -> None:
    parser = SseParser()
    assert parser.feed(b"id: 7\n\n") == []
    assert parser.last_event_id == "7"
    assert parser.feed(b"data: x\n\n") == [SseEvent("x", id="7")]


def test_sse_empty_id_sets_empty_string() -> None:
    assert parse_every_way(b"id: 1\nid\ndata: x\n\n") == [SseEvent("x", id="")]


def test_sse_retry_set_only_when_all_ascii_digits() -> None:
    for value in [b"2000x", b"-1", b"+5", b" 5", b"", b"1.5", "\u0661".encode()]:
        stream = b"retry: " + value + b"\ndata: x\n\n"
        assert parse_every_way(stream) == [SseEvent("x")], value
    assert parse_every_way(b"retry:1000\ndata: x\n\n") == [SseEvent("x", retry=1000)]
    assert parse_every_way(b"retry: 0042\ndata: x\n\n") == [SseEvent("x", retry=42)]


def test_sse_retry_persists_like_the_id() -> None:
    stream = b"retry: 10\n\ndata: a\n\nretry: 20\ndata: b\n\n"
    assert parse_every_way(stream) == [SseEvent("a", retry=10), SseEvent("b", retry=20)]


# Dispatch and end of stream


def test_sse_block_without_data_is_not_dispatched() -> None:
    assert parse_every_way(b"event: ping\n\n") == []
    assert parse_every_way(b"event: ping\n\ndata: x\n\n") == [SseEvent("x")]


def test_sse_extra_blank_lines_are_ignored() -> None:
    assert parse_every_way(b"\n\n\ndata: a\n\n\n\n\ndata: b\n\n\n") == [
        SseEvent("a"),
        SseEvent("b"),
    ]


def test_sse_chunk_beginning_with_blank_line() -> None:
    assert sse_events([b"data: a\n", b"\ndata: b\n", b"\n"]) == [SseEvent("a"), SseEvent("b")]


def test_sse_unterminated_last_event_is_discarded() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\n\ndata: b\n") == [SseEvent("a")]
    assert parser.close() == []
    assert sse_events([b"data: a\n\ndata: b"]) == [SseEvent("a")]


def test_sse_close_keeps_last_event_id_for_a_reconnection() -> None:
    parser = SseParser()
    assert parser.feed(b"id: 5\ndata: a\n\ndata: pending\n") == [SseEvent("a", id="5")]
    assert parser.close() == []
    assert parser.feed(BOM + b"data: b\n\n") == [SseEvent("b", id="5")]


def test_sse_empty_feed_is_a_no_op() -> None:
    parser = SseParser()
    assert parser.feed(b"") == []
    assert parser.feed(b"data: a") == []
    assert parser.feed(b"") == []
    assert parser.feed(b"\n\n") == [SseEvent("a")]


def test_sse_every_chunk_boundary_of_each_line_ending() -> None:
    for eol in [b"\n", b"\r", b"\r\n"]:
        stream = b"data:ok" + eol + eol
        assert parse_every_way(stream) == [SseEvent("ok")], eol


def test_sse_2000_events_in_one_chunk() -> None:
    stream = b"".join(b'data: {"n":%d}\n\n' % n for n in range(2000))
    events = sse_events([stream])
    assert events == [SseEvent(f'{{"n":{n}}}') for n in range(2000)]


def test_sse_10000_line_data() -> None:
    stream = b"".join(b"data: %d\n" % n for n in range(10000)) + b"\n"
    expected = [SseEvent("\n".join(str(n) for n in range(10000)))]
    assert sse_events([stream]) == expected
    assert sse_events([stream[i : i + 1000] for i in range(0, len(stream), 1000)]) == expected


def test_sse_10mb_data_frame() -> None:
    payload = b"x" * (10 * 1024 * 1024)
    stream = b"data: " + payload + b"\n\ndata: after\n\n"
    expected = [SseEvent(payload.decode()), SseEvent("after")]
    assert sse_events([stream]) == expected
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    assert sse_events(chunks) == expected


def test_sse_mixed_endings_utf8_and_unterminated_eof() -> None:
    stream = "data: héllo\r\ndata: 日本\r\rdata: 😀\n\ndata: lost".encode()
    assert parse_every_way(stream) == [SseEvent("héllo\n日本"), SseEvent("😀")]


# UTF-8


def test_sse_multibyte_chars_split_across_chunks() -> None:
    stream = "data: 😀 日本 é\n\nevent: ü\ndata:\n\ndata: \u2028\n\n".encode()
    expected = [SseEvent("😀 日本 é"), SseEvent("", "ü"), SseEvent("\u2028")]
    assert parse_every_way(stream) == expected


def test_sse_invalid_utf8_raises_with_the_byte_offset() -> None:
    with pytest.raises(SseParseError) as caught:
        sse_events([b"data: a\n\ndata: b\xffc\n\n"])
    assert str(caught.value) == "sse parse error: invalid UTF-8 in event stream at byte 16"


def test_sse_invalid_utf8_offset_counts_across_chunks() -> None:
    chunks = [b"data: a\n\n", b"data: b", b"c\xc3(d\n\n"]
    with pytest.raises(SseParseError, match=r"at byte 17$"):
        sse_events(chunks)


def test_sse_invalid_utf8_in_a_comment_raises() -> None:
    with pytest.raises(SseParseError, match=r"at byte 2$"):
        sse_events([b": \xff\n"])


def test_sse_invalid_utf8_waits_for_the_line_to_complete() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\n\ndata: \xff") == [SseEvent("a")]
    assert parser.close() == []  # the unterminated line is discarded, never decoded


def test_sse_events_before_an_invalid_line_come_first() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\n\ndata: \xff\n\n") == [SseEvent("a")]
    with pytest.raises(SseParseError, match=r"at byte 15$"):
        parser.feed(b"data: b\n\n")


def test_sse_invalid_utf8_offset_restarts_after_close() -> None:
    parser = SseParser()
    assert feed_all(parser, [b"data: a\n\n"]) == [SseEvent("a")]
    with pytest.raises(SseParseError, match=r"at byte 6$"):
        parser.feed(b"data: \xff\n")


def test_sse_parser_stays_broken_after_an_error() -> None:
    parser = SseParser()
    with pytest.raises(SseParseError):
        parser.feed(b"data: \xff\n\n")
    with pytest.raises(SseParseError):
        parser.feed(b"data: fine\n\n")
    with pytest.raises(SseParseError):
        parser.close()


# Buffer


def test_sse_buffer_starts_at_8192_bytes() -> None:
    parser = SseParser()
    assert parser.buffer_high_water == 8192
    parser.feed(b"data: small\n\n" * 10000)
    assert parser.buffer_high_water == 8192


def test_sse_buffer_high_water_is_bounded_by_the_largest_frame() -> None:
    small = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n' * 5000
    big_frame = b"data: " + b"y" * (1024 * 1024) + b"\n\n"
    stream = small + big_frame + small + big_frame + small
    parser = SseParser()
    capacities = []
    events: list[SseEvent] = []
    for start in range(0, len(stream), 100):
        events += parser.feed(stream[start : start + 100])
        capacities.append(parser.buffer_high_water)
    assert len(events) == 3 * 5000 + 2
    assert parser.buffer_high_water <= len(big_frame)
    # the second big frame reused the buffer the first one grew
    assert capacities[len(stream) // 2 // 100] == capacities[-1]


@pytest.mark.parametrize("read", [1000, 65536])
@pytest.mark.parametrize("size", [1, 100, 8192, 8193, 100_015, 1024 * 1024])
def test_sse_buffer_capacity_within_the_seed_bound(size: int, read: int) -> None:
    """Seed 002: "The SSE parser keeps one reusable buffer that starts at 8192 bytes. Its
    high-water mark is the largest single frame plus one partial line." The capacity, not
    only the bytes held (a 100,023-byte frame read 1,000 bytes at a time grew it to
    109,306 bytes, an eighth at a time): the memory CPython allocated for the buffer
    (``bytearray.__alloc__()``, the length plus its one terminating byte) is checked,
    not only its length (growing it read by read kept 1,168,870 bytes allocated for a
    1 MiB frame's 1,048,582)."""
    frame = b"data: " + b"y" * size + b"\n\n"
    small = b"data: s\n\n"
    stream = small + frame + small + frame + small
    parser = SseParser()
    high = allocated = 0
    events = []
    for start in range(0, len(stream), read):
        events += parser.feed(stream[start : start + read])
        high = max(high, parser.buffer_high_water)
        allocated = max(allocated, parser._buf.__alloc__())  # the buffer's real memory
    assert [len(event.data) for event in events] == [1, size, 1, size, 1]
    line = len(frame) - 2  # the frame's line, without its blank line
    assert high <= max(8192, line)  # at most the frame's line: nothing more
    assert allocated <= max(8192, line) + 1


def test_sse_buffer_holds_one_line_not_the_read() -> None:
    parser = SseParser()
    frames = b"data: 0123456789\n\n" * 20000
    for start in range(0, len(frames), 65536):
        parser.feed(frames[start : start + 65536])
    assert parser.buffer_high_water == 8192


# Stray lines (Gemini's raw JSON error after the last event)

GEMINI_ERROR_TAIL = (
    b'data: {"candidates": [],"modelVersion": "gemini-2.0-flash"}\r\n\r\n'
    b"{\n"
    b'  "error": {\n'
    b'    "code": 503,\n'
    b'    "message": "The model is overloaded. Please try again later.",\n'
    b'    "status": "UNAVAILABLE"\n'
    b"  }\n"
    b"}\n"
)


def stray(events: list[SseEvent]) -> list[str]:
    return [e.data for e in events if e.event == STRAY_LINE]


def real(events: list[SseEvent]) -> list[SseEvent]:
    return [e for e in events if e.event != STRAY_LINE]


def test_sse_keep_stray_lines_returns_non_sse_lines_in_order() -> None:
    parser = SseParser(keep_stray_lines=True)
    events = feed_all(parser, bytewise(GEMINI_ERROR_TAIL))
    assert real(events) == [SseEvent('{"candidates": [],"modelVersion": "gemini-2.0-flash"}')]
    assert events[0] == real(events)[0]  # the event came first in the stream
    expected = GEMINI_ERROR_TAIL.decode().split("\r\n\r\n")[1].rstrip("\n")
    assert "\n".join(stray(events)) == expected


def test_sse_stray_lines_sit_between_the_events_around_them() -> None:
    parser = SseParser(keep_stray_lines=True)
    events = parser.feed(b"{\n: comment\ndata: x\nevent: e\nid: 1\nretry: 5\nfoo\n\ndata: y\n\n")
    assert [(e.event, e.data) for e in events] == [
        (STRAY_LINE, "{"), (STRAY_LINE, "foo"), ("e", "x"), ("message", "y"),
    ]


def test_sse_stray_lines_are_not_kept_by_default() -> None:
    parser = SseParser()
    events = feed_all(parser, [GEMINI_ERROR_TAIL])
    assert events == sse_events([GEMINI_ERROR_TAIL])
    assert stray(events) == []


def test_sse_stray_unterminated_last_line_is_kept_at_close() -> None:
    parser = SseParser(keep_stray_lines=True)
    events = feed_all(parser, [b"data: a\n\n{\n}"])
    assert real(events) == [SseEvent("a")]
    assert stray(events) == ["{", "}"]


def test_sse_stray_lines_do_not_change_events() -> None:
    stream = GEMINI_ERROR_TAIL + b"data: after\n\n"
    parser = SseParser(keep_stray_lines=True)
    assert real(feed_all(parser, [stream])) == sse_events([stream])


# The two paths


def test_sse_fast_path_takes_single_line_data_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[bool] = []
    original = SseParser._parse_frames

    def spy(self: SseParser, data: bytes, start: int, end: int, events: list[SseEvent]) -> bool:
        taken.append(original(self, data, start, end, events))
        return taken[-1]

    monkeypatch.setattr(SseParser, "_parse_frames", spy)
    stream = b'data: {"a":1}\n\ndata: {"b":"\xc3\xa9"}\n\ndata: [DONE]\n\n'
    assert sse_events([stream]) == [SseEvent('{"a":1}'), SseEvent('{"b":"é"}'), SseEvent("[DONE]")]
    assert taken == [True]


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b"data: a\r\n\ndata: b\n\n", ["a", "b"]),
        (b"data: a\rdata: b\n\n", ["a\nb"]),
        (b"data: a\n\ndata:b\n\n", ["a", "b"]),
        (b"data: a\n\ndata:  b\n\n", ["a", " b"]),
        (b"data: a\ndata: b\n\n", ["a\nb"]),
        (b"data: a\n\n\ndata: b\n\n", ["a", "b"]),
        (b"data: a\n\nevent: e\ndata: b\n\n", ["a", "b"]),
        (b"data: a\n\n: hi\n\ndata: b\n\n", ["a", "b"]),
        (b"data: a\n\ndata\n\n", ["a", ""]),
    ],
)
def test_sse_fast_path_near_misses_take_the_general_path(
    stream: bytes, expected: list[str]
) -> None:
    parser = SseParser()
    parser.feed(b"\n")  # settle the stream start, so the whole read may go fast
    assert [event.data for event in feed_all(parser, [stream])] == expected
    assert [event.data for event in sse_events(bytewise(stream))] == expected


def test_sse_fast_path_events_equal_init_built_events() -> None:
    # The fast path fills SseEvent's slots directly: only sound while attrs has no
    # validator, converter or setattr hook to run.
    for field in attrs.fields(SseEvent):
        assert field.validator is None and field.converter is None, field.name
    assert attrs.fields_dict(SseEvent).keys() == {"data", "event", "id", "retry"}
    parser = SseParser()
    parser.feed(b"id: 9\nretry: 3\n\n")
    events = parser.feed(b"data: a\n\ndata: b\n\n")
    assert events == [SseEvent("a", "message", "9", 3), SseEvent("b", "message", "9", 3)]
    assert all(type(event) is SseEvent for event in events)
    assert hash(events[0]) == hash(SseEvent("a", "message", "9", 3))


# Properties

TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("ab :\0é日😀\u2028\u2029\u0085\x0b\x0c\ufeff")),
        st.characters(codec="utf-8"),
    ),
    max_size=8,
)
LINE_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=8)
EOL = st.sampled_from(["\n", "\r", "\r\n"])


def field_line(value: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(
            st.sampled_from(["data", "event", "id", "retry"]),
            st.sampled_from(["", ":", ": ", ":  "]),
            value,
        ).map("".join),
        st.tuples(st.just("id: "), value, st.just("\0"), value).map("".join),
        st.tuples(st.just("retry: "), st.integers(0, 10**6)).map(lambda t: f"{t[0]}{t[1]}"),
        value.map(lambda text: ":" + text),
        value,
        st.just(""),
    )


def sse_stream(value: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Mixed SSE lines with any of the three line endings, maybe a BOM and a tail."""
    lines = st.lists(st.tuples(field_line(value), EOL).map("".join), max_size=25)
    return st.tuples(st.sampled_from(["", "", "\ufeff"]), lines, st.one_of(st.just(""), value)).map(
        lambda parts: (parts[0] + "".join(parts[1]) + parts[2]).encode()
    )


def data_frames(value: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Mostly OpenAI-shaped ``data: ...\\n\\n`` frames, the fast path's diet, with the
    near misses it must refuse: no space, CR endings, several lines, other fields."""
    near_miss = st.tuples(
        st.sampled_from(["data: ", "data:", "data:  ", "data", "event: ", "id: ", ":"]),
        value,
        st.sampled_from(["\n\n", "\n", "\r", "\r\n\r\n", "\n\r\n", "\r\n\n", "\n\n\n"]),
    ).map("".join)
    frame = st.one_of(
        value.map(lambda text: f"data: {text}\n\n"),
        value.map(lambda text: f"data: {text}\n\n"),
        near_miss,
        field_line(value).map(lambda line: line + "\n"),
    )
    return st.lists(frame, max_size=30).map(lambda frames: "".join(frames).encode())


STREAMS = st.one_of(sse_stream(TEXT), data_frames(LINE_TEXT), data_frames(TEXT))


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=STREAMS, data=st.data())
def test_sse_any_chunking_matches_whole_and_reference(stream: bytes, data: st.DataObject) -> None:
    expected = reference_events(stream)
    assert sse_events([stream]) == expected
    assert sse_events(data.draw(chunkings(stream))) == expected


@settings(max_examples=examples(200), deadline=None)
@given(stream=STREAMS, data=st.data())
def test_sse_fast_path_matches_general_path(stream: bytes, data: st.DataObject) -> None:
    chunks = data.draw(chunkings(stream))
    fast = sse_events(chunks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SseParser, "_parse_frames", lambda *args: False)
        assert sse_events(chunks) == fast == reference_events(stream)


@settings(max_examples=examples(200), deadline=None)
@given(stream=STREAMS, data=st.data())
def test_sse_byte_by_byte_matches_reference(stream: bytes, data: st.DataObject) -> None:
    assert sse_events(bytewise(stream)) == reference_events(stream)


@st.composite
def broken_streams(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """A stream of complete lines with bad UTF-8 put into one of them.

    Returns the stream, the offset of the bad line and the offset of the bad byte.
    """
    lines = draw(st.lists(st.tuples(field_line(LINE_TEXT), EOL), min_size=1, max_size=15))
    index = draw(st.integers(0, len(lines) - 1))
    body, eol = lines[index]
    split = draw(st.integers(0, len(body)))
    bad = draw(st.sampled_from([b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\x80"]))
    head = "".join(line + end for line, end in lines[:index]).encode()
    tail = "".join(line + end for line, end in lines[index + 1 :]).encode()
    before, after = body[:split].encode(), (body[split:] + eol).encode()
    stream = head + before + bad + after + tail
    return stream, len(head), len(head) + len(before)


@settings(max_examples=examples(300), deadline=None)
@given(broken=broken_streams(), data=st.data())
def test_sse_invalid_utf8_gives_same_events_then_error_any_chunking(
    broken: tuple[bytes, int, int], data: st.DataObject
) -> None:
    stream, line_start, bad_at = broken
    parser = SseParser()
    events: list[SseEvent] = []
    with pytest.raises(SseParseError) as caught:
        for chunk in data.draw(chunkings(stream)):
            events += parser.feed(chunk)
        events += parser.close()
    assert str(caught.value).endswith(f"at byte {bad_at}")
    assert events == reference_events(stream[:line_start])
