"""The runner: fused and as actors, the same turn.

Every conformance transcript, served over loopback at random chunkings, with and
without user stages (pass-through taps at random points), fused and as actors: the
items, the usage, the finish reason and the error are the same in every case as in a
fused turn of the whole body.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from conformance.targets import TARGETS, Target, normalized
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.fake_adapter import FAKE, frames

from cuca import CucaClient, CucaPlugin, RetryPolicy, Text, UnifiedRequest
from cuca.stages import HTTP_POINTS, after, tap
from cuca.testing import Reply, open_replay_server

CASES = [(t, name) for t in TARGETS for name in t.transcripts]
transcripts = pytest.mark.parametrize("target,name", CASES, ids=[f"{t.name}:{n}" for t, n in CASES])

Seen = tuple[list[Any], Any, Any, str | None]


async def _turn(client: CucaClient, target: Target, stages: list[Any], fused: bool) -> Seen:
    items: list[Any] = []
    try:
        async with client.generate_stream(target.request(), stages=stages, fused=fused) as stream:
            async for item in stream:
                items.append(item)
    except Exception as exc:  # the error that ended the turn, compared by type and text
        return normalized(items), None, None, f"{type(exc).__name__}: {exc}"
    response = stream.response
    assert response is not None
    return normalized(items), response.usage, response.finish_reason, None


@settings(max_examples=examples(5), deadline=None)
@given(data=st.data())
@transcripts
def test_runner_fused_and_actors_agree_on_every_transcript(
    target: Target, name: str, data: st.DataObject
) -> None:
    """What the user sees does not depend on the mode, the chunking or pass-through
    stages: the same items, usage, finish reason and error."""
    body = target.transcript(name)
    sizes = data.draw(st.lists(st.integers(1, max(1, len(body) // 2)), max_size=10))
    points = data.draw(st.lists(st.sampled_from(HTTP_POINTS), unique=True, max_size=3))
    stages = [after(point, tap(lambda item: None), name=f"tap_{point}") for point in points]

    async def main() -> list[Seen]:
        whole = Reply(body)
        chunked = Reply(body, chunks=sizes, delay=0.0005 if sizes else 0.0)
        seen: list[Seen] = []
        for reply, turn_stages, fused in [
            (whole, [], True),
            (chunked, [], True),
            (chunked, [], False),
            (chunked, stages, True),
            (chunked, stages, False),
        ]:
            async with open_replay_server(reply) as server:
                client = target.client(server.url, retry=RetryPolicy.never())
                async with client:
                    seen.append(await _turn(client, target, turn_stages, fused))
        return seen

    reference, *others = trio.run(main)
    for other in others:
        assert other == reference


async def test_runner_actors_mode_runs_every_point_in_its_own_task() -> None:
    """``fused=False``: the chunk hooks run in a task of the turn, not in the consumer's
    (fused: in the consumer's, see test_pipeline)."""
    tasks: list[trio.lowlevel.Task] = []

    class Where(CucaPlugin):
        name = "where"

        async def on_stream_chunk(self, block: Any) -> Any:
            tasks.append(trio.lowlevel.current_task())
            return block

    request = UnifiedRequest.new("fake-model").add_user_message("hi")
    async with open_replay_server(Reply(frames("a", "b"), chunks=[9, 9])) as server:
        async with CucaClient(FAKE, base_url=server.url, plugins=[Where()], fused=False) as client:
            done = await client.generate(request)
    assert done.message.content == (Text("ab"),)
    assert tasks and all(task is not trio.lowlevel.current_task() for task in tasks)
    assert {task.name for task in tasks} == {"chunk_hooks"}
