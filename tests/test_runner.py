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
from support.transcripts import transcript

from cuca import (
    Budget,
    CucaClient,
    CucaPlugin,
    RateLimiter,
    ResponseCache,
    RetryPolicy,
    Text,
    TurnObserver,
    TurnOutcome,
    UnifiedRequest,
)
from cuca.stages import HTTP_POINTS, after, tap
from cuca.testing import Reply, open_replay_server
from cuca.types import ProviderEndpoint

OPENAI = ProviderEndpoint.OPENAI
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


class Watching(CucaPlugin):
    """An observer that keeps what it saw of each turn: its items and how it ended."""

    name = "watching"
    observes_raw = True

    def __init__(self) -> None:
        self.turns: list[tuple[list[Any], int, str]] = []

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        seen: list[Any] = []
        raw = [0]
        turns = self.turns

        class Seen(TurnObserver):
            raw = True

            def on_raw(self, chunks: Any) -> None:
                raw[0] += sum(len(chunk) for chunk in chunks)

            def on_items(self, items: Any) -> None:
                seen.extend(items)

            def on_end(self, end: TurnOutcome) -> None:
                turns.append((seen, raw[0], end.status))

        return Seen()


def features(watching: Watching) -> list[CucaPlugin]:
    """A limiter, a budget, a response cache and an observer: every seam in use."""
    limiter = RateLimiter(requests_per_minute=10**6, input_tokens_per_minute=10**9,
                          max_concurrent=8)
    return [limiter, Budget(tokens=10**9), ResponseCache(), watching]


@settings(max_examples=examples(5), deadline=None)
@given(data=st.data())
def test_runner_fused_and_actors_agree_with_gates_a_cache_hit_and_observers(
    data: st.DataObject,
) -> None:
    """With gates, a response cache and an observer attached, a live turn (a miss) and
    the same turn again (a hit), fused and as actors, at any chunking, give what a plain
    fused turn gives: the same items, usage and finish reason; the observer sees each
    turn's items, the live turn's bytes, and an ``ok`` end."""
    body = transcript("openai/text")
    sizes = data.draw(st.lists(st.integers(1, max(1, len(body) // 2)), max_size=10))
    request = UnifiedRequest.new("gpt-4o").add_user_message("Hi").set_temperature(0)

    async def turn(client: CucaClient, fused: bool | None = None) -> Seen:
        items: list[Any] = []
        async with client.generate_stream(request, fused=fused) as stream:
            async for item in stream:
                items.append(item)
        assert stream.response is not None
        return normalized(items), stream.response.usage, stream.response.finish_reason, None

    async def main() -> tuple[Seen, list[tuple[bool, Seen, Seen, Watching]]]:
        chunked = Reply(body, chunks=sizes, delay=0.0005 if sizes else 0.0)
        async with open_replay_server([Reply(body), chunked, chunked]) as server:
            url = f"{server.url}/v1"
            async with CucaClient(OPENAI, base_url=url, api_key="k") as plain:
                reference = await turn(plain)
            runs = []
            for fused in (True, False):
                watching = Watching()
                async with CucaClient(OPENAI, base_url=url, api_key="k",
                                      plugins=features(watching), fused=fused) as client:
                    live, hit = await turn(client), await turn(client)
                runs.append((fused, live, hit, watching))
            assert len(server.requests) == 3  # the plain turn and one live turn per mode
        return reference, runs

    reference, runs = trio.run(main)
    for fused, live, hit, watching in runs:
        assert live == reference, f"fused={fused}: the live turn"
        assert hit == reference, f"fused={fused}: the cache hit"
        (live_items, live_raw, live_end), (hit_items, hit_raw, hit_end) = watching.turns
        assert normalized(live_items) == normalized(hit_items) == reference[0]
        assert live_raw == len(body) and hit_raw == 0  # a hit sends nothing, reads nothing
        assert live_end == hit_end == "ok"
