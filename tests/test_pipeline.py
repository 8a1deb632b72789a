"""The pipeline as data: custom stages at named points, and backpressure."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from support.fake_adapter import FAKE, frames

from cuca import ConfigurationError, CucaClient, Text, UnifiedRequest
from cuca.stages import HTTP_POINTS, after, before, map_items
from cuca.testing import Reply, open_replay_server

REQUEST = UnifiedRequest.new("fake-model").add_user_message("hi")


async def test_pipeline_stage_between_transport_and_sse_parse_counts_bytes() -> None:
    counted: list[int] = []

    async def count_bytes(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async with send:
            async for batch in receive:
                counted.extend(len(chunk) for chunk in batch if isinstance(chunk, bytes))
                await send.send(batch)

    body = frames(*"abcdef")
    async with open_replay_server(Reply(body, chunks=[7] * 8, delay=0.001)) as server:
        async with CucaClient(
            FAKE, base_url=server.url, stages=[after("transport", count_bytes)]
        ) as client:
            done = await client.generate(REQUEST)
    assert done.text == "abcdef"
    assert sum(counted) == len(body)
    assert len(counted) > 1


async def test_pipeline_stage_between_decode_and_chunk_hooks_rewrites_text() -> None:
    def shout(item: Any) -> Any:
        return Text(item.text.upper()) if isinstance(item, Text) else item

    async with open_replay_server(Reply(frames("a", "b"))) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            async with client.generate_stream(
                REQUEST, stages=[before("chunk_hooks", map_items(shout), name="shout")]
            ) as stream:
                items = [item async for item in stream]
    assert items == [Text("A"), Text("B")]


def test_pipeline_names_and_unknown_points() -> None:
    client = CucaClient(FAKE)
    pipeline = client.pipeline([after("decode", map_items(str), name="x")])
    assert pipeline.names == (*HTTP_POINTS[:5], "x", "chunk_hooks")
    with pytest.raises(ConfigurationError, match="no stage named 'nope'"):
        client.pipeline([after("nope", map_items(str))])


async def test_pipeline_backpressure_bounds_what_is_buffered() -> None:
    """A consumer that pauses: the bytes the transport has read but the consumer has not
    yet seen as blocks stay within a few network reads, never the whole stream."""
    read = 0  # bytes the transport handed to the pipeline

    async def count(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        nonlocal read
        async with send:
            async for batch in receive:
                read += sum(len(chunk) for chunk in batch if isinstance(chunk, bytes))
                await send.send(batch)

    texts = [f"t{i:05d}" for i in range(5000)]
    frame = len(frames(texts[0], done=False))  # every frame has this many bytes
    body = frames(*texts)
    peak = 0
    # 64-byte HTTP chunks: the transport reads at most 64 bytes at a time
    async with open_replay_server(Reply(body, chunks=[64] * (len(body) // 64))) as server:
        async with CucaClient(
            FAKE, base_url=server.url, stages=[after("transport", count)]
        ) as client:
            async with client.generate_stream(REQUEST) as stream:
                consumed = 0
                async for _ in stream:
                    consumed += 1
                    if consumed % 500 == 0:
                        await trio.sleep(0.1)  # the server could send it all meanwhile
                        peak = max(peak, read - consumed * frame)
    assert consumed == len(texts)
    assert read == len(body)
    # every channel and every stage holds at most one read (or what it made of one)
    assert peak <= 32 * 64, f"{peak} bytes read ahead of a paused consumer"


async def test_pipeline_slow_consumer_slows_the_transport() -> None:
    """With the consumer paused, the transport stops after a bounded number of reads."""
    reads = 0

    async def count_reads(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        nonlocal reads
        async with send:
            async for batch in receive:
                reads += 1
                await send.send(batch)

    frame = b"data: T x\n\n"
    async with open_replay_server(Reply.endless(frame)) as server:
        async with CucaClient(
            FAKE, base_url=server.url, stages=[after("transport", count_reads)]
        ) as client:
            async with client.generate_stream(REQUEST) as stream:
                await stream.__anext__()
                # the consumer stalls while the server could send megabytes: the
                # transport must stop after filling the few bounded channels
                stable, last = 0, -1
                with trio.fail_after(10):
                    while stable < 5:
                        await trio.sleep(0.05)
                        stable, last = (stable + 1, last) if reads == last else (0, reads)
                assert reads <= 8


async def test_pipeline_a_stage_that_misuses_its_channel_fails_the_turn() -> None:
    """A buggy user stage (it closes its output, then sends) is reported, never a clean
    but shortened turn."""

    async def buggy(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            await send.send(batch)
            await send.aclose()

    async with open_replay_server(
        Reply(frames("a", "b", "c"), chunks=[11, 11], delay=0.05)
    ) as server:
        async with CucaClient(FAKE, base_url=server.url, stages=[after("decode", buggy)]) as client:
            with pytest.raises(trio.ClosedResourceError):
                async with client.generate_stream(REQUEST) as stream:
                    async for _ in stream:
                        pass
            assert stream.response is None


async def test_pipeline_without_user_stages_runs_in_the_consumers_task() -> None:
    """No channel hop between the network and the consumer: the chunk hooks (the last
    stage) run in the task that iterates the stream, and no other task of the turn
    is running while it reads."""
    from cuca import CucaPlugin

    seen: list[trio.lowlevel.Task] = []
    running: list[str] = []

    class Where(CucaPlugin):
        name = "where"

        async def on_stream_chunk(self, block: Any) -> Any:
            me = trio.lowlevel.current_task()
            seen.append(me)
            tasks = [t.name for n in me.child_nurseries for t in n.child_tasks]
            running.extend(name for name in tasks if not name.startswith("cuca.testing"))
            return block

    async with open_replay_server(Reply(frames("a", "b", "c"), chunks=[9] * 4)) as server:
        async with CucaClient(FAKE, base_url=server.url, plugins=[Where()]) as client:
            async with client.generate_stream(REQUEST) as stream:
                items = [item async for item in stream]
    assert items == [Text("a"), Text("b"), Text("c")]
    assert seen == [trio.lowlevel.current_task()] * 3
    assert running == []


async def test_pipeline_a_read_cancelled_mid_stream_is_an_error_not_a_cut_turn() -> None:
    """What the user sees: cancelling one ``__anext__`` while it waits for the network
    closes the response; iterating again raises a TransportError, never a clean end
    of a turn that was cut."""
    from cuca import TransportError

    reply = Reply(frames("a", "b"), chunks=[9, 9], delay=0.5)
    async with open_replay_server(reply) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            async with client.generate_stream(REQUEST) as stream:
                with trio.move_on_after(0.2) as scope:
                    await stream.__anext__()
                assert scope.cancelled_caught
                with pytest.raises(TransportError, match="read was cancelled"):
                    await stream.__anext__()
            assert stream.response is None
            assert (await client.generate(REQUEST)).text == "ab"  # the client still works


async def test_pipeline_a_compressed_body_is_decoded_before_parsing() -> None:
    """A server that gzips its event stream: the transport hands on the decoded bytes
    (an uncompressed one gets the raw reads, without a decoding layer)."""
    import gzip

    body = gzip.compress(frames("a", "b"))
    headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    async with open_replay_server(Reply(body, headers=headers, chunks=[10] * 20)) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            done = await client.generate(REQUEST)
    assert done.text == "ab"
