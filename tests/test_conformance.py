"""The conformance suite: every HTTP provider adapter, the same faults.

Like ``trio.testing.check_one_way_stream``, each check is generic; ``conformance.targets``
says how to reach each provider. What the user sees in each case is stated in the test.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
from typing import Any

import pytest
import trio
from conformance.targets import (
    TARGETS,
    Target,
    decode,
    normalized,
    openai_tool_frames,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.budget import examples, offsets

from cuca import (
    CucaError,
    HttpStatusError,
    RetryPolicy,
    Thinking,
    Timeouts,
    ToolCall,
    ToolCallError,
    TransportError,
    merge_blocks,
)
from cuca.testing import RecordedRequest, Reply, open_replay_server
from cuca.testing.conformance import CHECKS, check_adapter

ids = [t.name for t in TARGETS]
targets = pytest.mark.parametrize("target", TARGETS, ids=ids)
cases = [(t, name) for t in TARGETS for name in t.transcripts]
transcripts = pytest.mark.parametrize("target,name", cases, ids=[f"{t.name}:{n}" for t, n in cases])


def frame_ends(data: bytes) -> list[int]:
    ends, start = [], 0
    for sep in (b"\r\n\r\n", b"\n\n"):
        start = 0
        while (found := data.find(sep, start)) != -1:
            ends.append(found + len(sep))
            start = found + 1
    return sorted(set(ends))


def is_prefix(short: list[Any], full: list[Any]) -> bool:
    return full[: len(short)] == short


# -- 1. truncation ---------------------------------------------------------------------


@transcripts
def test_conformance_transcript_decodes_cleanly(target: Target, name: str) -> None:
    items, error = decode(target, [target.transcript(name)])
    assert error is None, f"{name}: {error!r}"
    assert items, "a clean transcript yields something"


@transcripts
def test_conformance_truncation_at_every_offset(target: Target, name: str) -> None:
    """Cut anywhere: a clean end or a typed CucaError, and the items before the cut are
    a prefix of the whole turn's items (nothing duplicated or reordered)."""
    data = target.transcript(name)
    full, _ = decode(target, [data])
    step = max(1, len(data) // 400)
    offsets = sorted({*range(0, len(data), step), *frame_ends(data), len(data) - 1})
    for cut in offsets:
        items, error = decode(target, [data[:cut]])
        assert error is None or isinstance(error, CucaError), (cut, repr(error))
        blocks = [i for i in items if not isinstance(i, CucaError)]
        full_blocks = [i for i in full if not isinstance(i, CucaError)]
        assert is_prefix(blocks, full_blocks) or is_prefix(
            list(merge_blocks(blocks)), list(merge_blocks(full_blocks))
        ), (cut, blocks)
        if error is None and target.strict_end:
            # a clean end means nothing was lost: every block of the turn arrived
            assert merge_blocks(blocks) == merge_blocks(full_blocks), (cut, "silently lost")


# -- the public kit, over real HTTP ------------------------------------------------------


@pytest.mark.parametrize("check", list(CHECKS))
@targets
def test_conformance_kit(target: Target, check: str) -> None:
    """Every built-in adapter through the public entry point, one check at a time: any
    chunking gives the same blocks; a body cut anywhere gives a prefix, then a typed error
    (never a clean end that lost blocks); a cut connection gives a TransportError; a stall
    times out; error statuses, garbage and wrongly typed JSON give typed errors; a turn
    dropped at any hop leaves no task, thread, descriptor or connection."""
    check_adapter(
        target.endpoint,
        target.kit_transcripts(),
        checks=[check],
        max_examples=examples(10),
        max_offsets=offsets(48),
        **target.kit_options(),
    )


# -- 2. stalls -------------------------------------------------------------------------


@targets
async def test_conformance_stall_with_read_timeout_fails_in_time(
    target: Target, autojump_clock: Any
) -> None:
    """The server stops sending mid-stream: with a read timeout of 5 s the user gets a
    TransportError saying it timed out, 5 s (mock clock) after the last byte."""
    body = target.transcript(target.transcripts[0])
    async with open_replay_server(Reply(body, stall_after=len(body) // 2)) as server:
        async with target.client(server.url, timeout=Timeouts(read=5)) as client:
            start = trio.current_time()
            with pytest.raises(TransportError, match="timed out"):
                async with client.generate_stream(target.request()) as stream:
                    async for _ in stream:
                        pass
            assert 5 <= trio.current_time() - start <= 5.5


@targets
async def test_conformance_stall_without_timeout_is_ended_by_dropping(target: Target) -> None:
    """No timeout configured (the default): the turn waits, and dropping it ends
    everything at once, connection included."""
    body = target.transcript(target.transcripts[0])
    async with open_replay_server(Reply(body, stall_after=len(body) // 2)) as server:
        async with target.client(server.url) as client:
            with trio.move_on_after(0.3) as scope:
                async with client.generate_stream(target.request()) as stream:
                    async for _ in stream:
                        pass
            assert scope.cancelled_caught
            with trio.fail_after(30):  # a guard against a hang, not a measure
                await server.wait_connections_closed()


# -- 3. HTTP errors --------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 404, 413, 429, 500, 503])
@pytest.mark.parametrize("json_body", [True, False], ids=["json", "text"])
@targets
async def test_conformance_http_error_shows_the_vendor_message(
    target: Target, status: int, json_body: bool
) -> None:
    message = f"vendor says no ({status})"
    body = target.error_body(status, message) if json_body else f"<html>{message}</html>".encode()
    ctype = "application/json" if json_body else "text/html"
    reply = Reply(body, status=status, headers=[("content-type", ctype)])
    async with open_replay_server(reply) as server:
        async with target.client(server.url, retry=RetryPolicy.never()) as client:
            with pytest.raises(HttpStatusError) as info:
                await client.generate(target.request())
    error = info.value
    assert error.status == status
    assert error.body == body.decode()
    assert message in str(error)
    if target.api_key:
        assert target.api_key not in repr(error) + str(error) + error.body


# -- retries -----------------------------------------------------------------------------


async def retried_turn(
    target: Target, first: Reply
) -> tuple[list[Any], float, list[RecordedRequest]]:
    """`first`, then the target's first transcript: the turn's blocks, the (mock) seconds
    it took and the requests the server saw."""
    good = Reply(target.transcript(target.transcripts[0]))
    async with open_replay_server([first, good]) as server:
        async with target.client(server.url, retry=RetryPolicy(max_retries=1)) as client:
            start = trio.current_time()
            done = await client.generate(target.request())
            elapsed = trio.current_time() - start
    return list(done.blocks), elapsed, server.requests


def expected_blocks(target: Target) -> list[Any]:
    items, _ = decode(target, [target.transcript(target.transcripts[0])])
    return list(merge_blocks([i for i in items if not isinstance(i, CucaError)]))


@targets
async def test_conformance_retries_a_503_then_streams(target: Target, autojump_clock: Any) -> None:
    """A 503 before the stream: the user sees only the good turn that followed, after the
    policy's backoff (0.5 s less up to 25 % jitter), and the same request was sent twice."""
    busy = Reply(
        target.error_body(503, "overloaded"),
        status=503,
        headers=[("content-type", "application/json")],
    )
    blocks, elapsed, requests = await retried_turn(target, busy)
    assert normalized(blocks) == expected_blocks(target)
    assert 0.375 <= elapsed < 0.6
    assert len(requests) == 2 and requests[0].body == requests[1].body


@targets
async def test_conformance_retries_a_429_after_its_retry_after(
    target: Target, autojump_clock: Any
) -> None:
    """A 429 with ``Retry-After: 3``: the turn waits those 3 s (mock clock), then streams."""
    limited = Reply(
        target.error_body(429, "slow down"),
        status=429,
        headers=[("content-type", "application/json"), ("retry-after", "3")],
    )
    blocks, elapsed, requests = await retried_turn(target, limited)
    assert normalized(blocks) == expected_blocks(target)
    assert 3 <= elapsed < 3.5
    assert len(requests) == 2 and requests[0].body == requests[1].body


# -- 4. garbage ------------------------------------------------------------------------


GARBAGE = {
    "invalid_utf8": b"data: \xff\xfe\xfd\n\n",
    "not_json": b"data: {this is not json\n\n",
    "wrong_shape": b'data: [1, 2, 3]\n\ndata: {"choices": "nope", "type": 7}\n\n',
    "unknown_event": b'event: mystery\ndata: {"type": "mystery"}\n\n',
    "nul_and_controls": b'data: {"\x00": "\x01"}\n\n',
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
@targets
def test_conformance_garbage_gives_typed_errors_or_documented_skips(
    target: Target, kind: str
) -> None:
    _, error = decode(target, [GARBAGE[kind]])
    assert error is None or isinstance(error, CucaError), repr(error)


@targets
def test_conformance_ten_megabyte_frame_keeps_memory_bounded(target: Target) -> None:
    big = b'data: {"x": "' + b"a" * (10 * 1024 * 1024) + b'"}\n\n'
    chunks = [big[i : i + 65536] for i in range(0, len(big), 65536)]
    gc.collect()
    tracemalloc.start()
    try:
        _, error = decode(target, chunks)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error is None or isinstance(error, CucaError)
    assert peak < 8 * len(big), f"peak {peak / 2**20:.0f} MiB for a 10 MiB frame"


@settings(max_examples=examples(60), deadline=None)
@given(data=st.binary(max_size=300), cut=st.integers(0, 300))
@targets
def test_conformance_arbitrary_bytes_raise_only_cuca_errors(
    target: Target, data: bytes, cut: int
) -> None:
    _items, error = decode(target, [data[:cut], data[cut:]])
    assert error is None or isinstance(error, CucaError), repr(error)


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
@transcripts
def test_conformance_arbitrary_chunking_never_changes_output(
    target: Target, name: str, data: st.DataObject
) -> None:
    body = target.transcript(name)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=12)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert decode(target, chunks) == decode(target, [body])


# -- 12. hostile tool-call arguments -----------------------------------------------------


HOSTILE_ARGS = {
    "deep_nesting": '{"a": ' + "[" * 10000 + "]" * 10000 + "}",
    "deep_object": '{"a": ' * 10000 + "1" + "}" * 10000,
    "huge_number": '{"n": 1' + "0" * 5000 + "}",
    "huge_float": '{"n": 1e999999}',
    "duplicate_keys": '{"a": 1, "a": 2}',
    "lone_surrogate": '{"s": "\\ud800"}',
    "not_an_object": "[1, 2, 3]",
    "truncated": '{"city": "Par',
}


TOOL_TARGETS = [t for t in TARGETS if t.tool_frames is not None]  # not llama.cpp /completion


@pytest.mark.parametrize("kind", sorted(HOSTILE_ARGS))
@pytest.mark.parametrize("target", TOOL_TARGETS, ids=[t.name for t in TOOL_TARGETS])
def test_conformance_hostile_tool_arguments(target: Target, kind: str) -> None:
    """A typed error or a defined value, never a crash of another kind."""
    assert target.tool_frames is not None
    items, error = decode(target, [target.tool_frames(HOSTILE_ARGS[kind])])
    assert error is None or isinstance(error, CucaError), repr(error)
    calls = [i for i in items if isinstance(i, ToolCall)]
    if kind == "duplicate_keys" and calls:
        assert calls[0].arguments == {"a": 2}  # defined: the last one wins, as in json
    if kind in ("not_an_object", "truncated"):
        assert not calls
        assert any("malformed tool call" in str(i) for i in items) or error is not None


# -- 5. cancellation, file descriptors -------------------------------------------------


# -- 10. secrets -----------------------------------------------------------------------


@targets
async def test_conformance_secrets_never_reach_repr_str_or_logs(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-leak-canary-9f8e7d6c5b4a"  # every provider sends a key when one is set
    caplog.set_level(logging.DEBUG)
    reply = Reply(
        target.error_body(401, "bad key"),
        status=401,
        headers=[("content-type", "application/json")],
    )
    async with open_replay_server(reply) as server:
        async with target.client(server.url, api_key=secret) as client:
            adapter = client.adapter()
            wire = adapter.encode(target.request())
            with pytest.raises(HttpStatusError) as info:
                await client.generate(target.request())
        assert server.requests, "the key was really sent"
    shown = [
        repr(client),
        str(client),
        repr(adapter),
        repr(wire),
        str(wire),
        repr(info.value),
        str(info.value),
        caplog.text,
    ]
    for text in shown:
        assert secret not in text


# -- well-formed JSON of the wrong types -------------------------------------------------

json_leaves = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
)
json_values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "delta",
                    "content",
                    "tool_calls",
                    "index",
                    "function",
                    "arguments",
                    "name",
                    "id",
                    "usage",
                    "type",
                    "message",
                    "content_block",
                    "partial_json",
                    "text",
                    "thinking",
                    "candidates",
                    "parts",
                    "functionCall",
                    "args",
                    "error",
                    "usageMetadata",
                    "finish_reason",
                    "stop",
                    "reasoning_content",
                    "input",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
event_names = st.sampled_from(
    [
        "message",
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "error",
        "ping",
    ]
)


@settings(max_examples=examples(150), deadline=None)
@given(frames=st.lists(st.tuples(event_names, json_values), min_size=1, max_size=6))
@example(frames=[("message", {"choices": [{"delta": "x"}]})])
@example(frames=[("message", {"choices": 5})])
@example(frames=[("message", {"choices": [{"delta": {"tool_calls": 5}}]})])
@example(frames=[("message_start", {"type": [1]})])
@example(frames=[("message", {"candidates": [{"content": {"parts": "x"}}]})])
@targets
def test_conformance_wrongly_typed_json_raises_only_cuca_errors(
    target: Target, frames: list[tuple[str, Any]]
) -> None:
    """Valid JSON with the vendor's keys but the wrong types: a typed error or a skip."""
    import json

    body = b"".join(
        f"event: {name}\ndata: {json.dumps(value)}\n\n".encode() for name, value in frames
    )
    _, error = decode(target, [body])
    assert error is None or isinstance(error, CucaError), repr(error)


# -- 7. what a block says about where it came from -------------------------------------

REASONING_FRAME = (
    b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)


@targets
def test_conformance_every_thinking_block_names_its_provider(target: Target) -> None:
    """docs/reasoning.md: every Thinking block carries the provider that produced it."""
    bodies = [target.transcript(name) for name in target.transcripts]
    if target.tool_frames is openai_tool_frames:  # an OpenAI-compatible wire
        bodies.append(REASONING_FRAME)
    thoughts = [
        item for body in bodies for item in decode(target, [body])[0] if isinstance(item, Thinking)
    ]
    assert all(t.provider == target.endpoint for t in thoughts), thoughts
    # every wire that reasons was seen reasoning: /completion has none, and no
    # llama.cpp /responses transcript holds any
    assert thoughts or target.name in ("llama_cpp_completion", "llama_cpp_responses")


@pytest.mark.parametrize("target", TOOL_TARGETS, ids=[t.name for t in TOOL_TARGETS])
def test_conformance_malformed_call_carries_its_id_and_name(target: Target) -> None:
    """The caller can answer the broken call and keep the conversation valid."""
    assert target.tool_frames is not None
    items, error = decode(target, [target.tool_frames("[1, 2]")])
    assert error is None
    (bad,) = [i for i in items if isinstance(i, CucaError)]
    assert isinstance(bad, ToolCallError)
    assert (bad.name, bad.raw) == ("f", "[1, 2]")
    if target.name == "gemini":  # Gemini sent no id: a fresh one (decode names it so)
        assert bad.tool_call_id == "call_<synthetic>"
    else:
        assert bad.tool_call_id in ("call_1", "toolu_1")
    assert bad.message.startswith("malformed tool call: ")
