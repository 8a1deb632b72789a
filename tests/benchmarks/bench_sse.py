"""Benchmark the SSE parser against httpx-sse, the openai SDK and a bare split.

Run ``python tests/benchmarks/bench_sse.py``: one run, best of 3 per parser (CPU time),
a table of MB/s and events/s, then the ratios. Cases: (a) ~50 MB of typical OpenAI chat chunks
(~200 bytes a frame) read 64 KiB at a time; (b) a stream of 64 KiB frames read the same
way. Never part of pass/fail.
"""

from __future__ import annotations

import codecs
import gc
import time
from collections.abc import Callable, Iterator

import httpx_sse
from openai._streaming import SSEDecoder as OpenAiDecoder

from cuca.stages.sse import SseParser, sse_events

READ_SIZE = 64 * 1024
STREAM_SIZE = 50 * 1000 * 1000
REPEATS = 3
WORDS = ["Hello", " world", ",", " the", " quick", " brown", " fox", " jumps", " ü", " 日本"]

Parser = Callable[[list[bytes]], int]


def openai_chat_stream(size: int) -> bytes:
    """About ``size`` bytes of chat.completion.chunk frames, then ``[DONE]``."""
    frames = []
    total = 0
    index = 0
    while total < size:
        word = WORDS[index % len(WORDS)].replace('"', '\\"')
        frame = (
            'data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":'
            f'"chat.completion.chunk","created":{1741569952 + index // 50},'
            '"model":"gpt-4o-mini",'
            f'"choices":[{{"index":0,"delta":{{"content":"{word}"}},"logprobs":null,'
            '"finish_reason":null}]}\n\n'
        ).encode()
        frames.append(frame)
        total += len(frame)
        index += 1
    frames.append(b"data: [DONE]\n\n")
    return b"".join(frames)


def big_frame_stream(size: int, payload_size: int = 64 * 1024) -> bytes:
    """About ``size`` bytes of single-line data frames with ``payload_size`` bytes of
    JSON each (so frames straddle the 64 KiB reads)."""
    payload = (b'{"text":"' + b"lorem ipsum " * (payload_size // 12 + 1))[: payload_size - 2]
    frame = b"data: " + payload + b'"}\n\n'
    return frame * max(1, size // len(frame))


def anthropic_stream(size: int) -> bytes:
    """About ``size`` bytes of Anthropic-shaped ``event:`` + ``data:`` frames."""
    frames = []
    total = 0
    index = 0
    while total < size:
        word = WORDS[index % len(WORDS)]
        frame = (
            "event: content_block_delta\n"
            'data: {"type":"content_block_delta","index":0,'
            f'"delta":{{"type":"text_delta","text":"{word}"}}}}\n\n'
        ).encode()
        frames.append(frame)
        total += len(frame)
        index += 1
    return b"".join(frames)


def reads(stream: bytes, size: int = READ_SIZE) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def frame_reads(stream: bytes) -> list[bytes]:
    """One read per frame, as a server streaming token by token delivers them."""
    return [frame + b"\n\n" for frame in stream.split(b"\n\n")[:-1]]


def run_cuca(chunks: list[bytes]) -> int:
    parser = SseParser()
    count = 0
    for chunk in chunks:
        count += len(parser.feed(chunk))
    return count + len(parser.close())


def run_httpx_sse(chunks: list[bytes]) -> int:
    """httpx-sse's own pipeline: incremental UTF-8 text, its line decoder, its decoder."""
    text_decoder = codecs.getincrementaldecoder("utf-8")()
    lines = httpx_sse._decoders.SSELineDecoder()
    decoder = httpx_sse._decoders.SSEDecoder()
    count = 0
    for chunk in chunks:
        for line in lines.decode(text_decoder.decode(chunk)):
            if decoder.decode(line) is not None:
                count += 1
    for line in lines.flush():
        if decoder.decode(line) is not None:
            count += 1
    return count


def run_openai(chunks: list[bytes]) -> int:
    count = 0
    for _ in OpenAiDecoder().iter_bytes(iter(chunks)):
        count += 1
    return count


def run_bare_split(chunks: list[bytes]) -> int:
    """The floor: split on ``\\n\\n`` and slice, no decoding, no fields."""
    buffer = b""
    count = 0
    for chunk in chunks:
        buffer += chunk
        start = 0
        end = buffer.find(b"\n\n")
        while end >= 0:
            _frame = buffer[start:end]
            count += 1
            start = end + 2
            end = buffer.find(b"\n\n", start)
        buffer = buffer[start:]
    return count


PARSERS: dict[str, Parser] = {
    "cuca": run_cuca,
    "httpx-sse": run_httpx_sse,
    "openai": run_openai,
    "bare split": run_bare_split,
}


def best_time(parser: Parser, chunks: list[bytes]) -> tuple[float, int]:
    """Best CPU time (``process_time``) of ``REPEATS`` runs, and the event count.

    CPU time rather than wall time: the parsers are single-threaded and CPU-bound, and
    CPU time does not count the time a busy machine spends running something else.
    """
    best = float("inf")
    count = 0
    for _ in range(REPEATS):
        gc.collect()
        started = time.process_time()
        count = parser(chunks)
        best = min(best, time.process_time() - started)
    return best, count


def cases() -> Iterator[tuple[str, bytes, list[bytes]]]:
    """The two target cases, then two for information: a read per frame, and frames
    with an ``event:`` line (the general path)."""
    chat = openai_chat_stream(STREAM_SIZE)
    yield "(a) chat chunks ~200 B", chat, reads(chat)
    big = big_frame_stream(STREAM_SIZE)
    yield "(b) 64 KiB frames", big, reads(big)
    small = openai_chat_stream(STREAM_SIZE // 5)
    yield "(c) a read per frame", small, frame_reads(small)
    anthropic = anthropic_stream(STREAM_SIZE // 5)
    yield "(d) event+data frames", anthropic, reads(anthropic)


def check_agreement(chunks: list[bytes]) -> None:
    """Refuse to time a parser that is fast because it is wrong: cuca's events must be
    httpx-sse's on the first reads of each case."""
    sample = chunks[:64]
    ours = [(event.event, event.data) for event in sse_events(sample)]
    text = codecs.getincrementaldecoder("utf-8")()
    lines = httpx_sse._decoders.SSELineDecoder()
    decoder = httpx_sse._decoders.SSEDecoder()
    theirs = []
    for chunk in sample:
        for line in lines.decode(text.decode(chunk)):
            event = decoder.decode(line)
            if event is not None:
                theirs.append((event.event, event.data))
    assert ours == theirs, "cuca and httpx-sse disagree"


def main() -> None:
    print(f"{'case':<24}{'parser':<12}{'MB/s':>10}{'events/s':>14}{'events':>10}")
    ratios = []
    for name, stream, chunks in cases():
        check_agreement(chunks)
        speed = {}
        for label, parser in PARSERS.items():
            seconds, count = best_time(parser, chunks)
            speed[label] = len(stream) / seconds / 1e6
            print(f"{name:<24}{label:<12}{speed[label]:>10.0f}{count / seconds:>14,.0f}{count:>10}")
        ratios.append(
            f"{name}: cuca/httpx-sse {speed['cuca'] / speed['httpx-sse']:.2f}x, "
            f"cuca/openai {speed['cuca'] / speed['openai']:.2f}x, "
            f"cuca/bare split {speed['cuca'] / speed['bare split']:.2f}x"
        )
    print()
    print("\n".join(ratios))


if __name__ == "__main__":
    main()
