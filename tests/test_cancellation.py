"""Dropping a stream at any point ends the whole turn: no task, thread or open connection.

Drops are deterministic: a turn is dropped when the n-th message passes a chosen hop of
its pipeline (the consumer's scope is cancelled from there) or after the consumer's n-th
item (``break``), so a failure reproduces and Hypothesis shrinks it to the earliest hop
and index. Every real adapter gets the same drops through the conformance kit
(``tests/test_conformance.py``, check ``drops``); here the fake adapter on an endless
stream, and the local engine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.fake_adapter import FAKE, frames

from cuca import (
    Budget,
    CucaClient,
    CucaPlugin,
    LocalModel,
    ProviderEndpoint,
    RateLimiter,
    ResponseCache,
    SamplingConfig,
    TurnObserver,
    UnifiedRequest,
)
from cuca.engine import default_model_path
from cuca.testing import Reply, open_replay_server
from cuca.testing.conformance import Drop, Outcome, Subject, drive, hops, run_turn

REQUEST = UnifiedRequest.new("fake-model").add_user_message("hi")
ONCE = {"request_hooks", "encode"}  # hops that see one message per turn


def drops(local: bool = False) -> st.SearchStrategy[Drop]:
    """A hop and a message index at it that every turn reaches."""
    return st.builds(
        lambda hop, index: Drop(hop, 0 if hop in ONCE else index),
        st.sampled_from(hops(local)),
        st.integers(0, 40),
    )


def assert_dropped_cleanly(outcome: Outcome) -> None:
    """What the user sees: the drop ends the turn, quietly, and nothing is left behind."""
    assert outcome.error is None, repr(outcome.error)
    assert outcome.dropped and not outcome.completed
    assert outcome.leaks == ()


@settings(max_examples=examples(25), deadline=None)
@given(drop=drops(), pace=st.sampled_from([0.0, 0.001]), fused=st.booleans())
def test_cancellation_drop_at_any_hop_leaves_nothing(drop: Drop, pace: float, fused: bool) -> None:
    """An endless stream dropped anywhere, fused or as actors: no task, thread,
    descriptor or connection."""
    reply = Reply.endless(b"data: T tok\n\n", delay=pace)
    assert_dropped_cleanly(run_turn(Subject(FAKE, fused=fused), reply, drop=drop))


@settings(max_examples=examples(10), deadline=None)
@given(drop=drops(), fused=st.booleans())
def test_cancellation_drop_at_any_hop_with_gates_leaves_nothing(drop: Drop, fused: bool) -> None:
    """With a rate limiter, a budget, a response cache and an observer attached (every
    seam of the turn in use), an endless stream dropped anywhere, fused or as actors:
    no task, thread, descriptor or connection is left."""
    limiter = RateLimiter(max_concurrent=1)
    plugins = (limiter, Budget(tokens=10**9), ResponseCache(), Observing())
    reply = Reply.endless(b"data: T tok\n\n")
    assert_dropped_cleanly(run_turn(Subject(FAKE, fused=fused, plugins=plugins), reply, drop=drop))


class Observing(CucaPlugin):
    """An observer of every turn, raw bytes included, that does nothing."""

    name = "observing"
    observes_raw = True

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        return TurnObserver()


@pytest.fixture(scope="module")
def endless_url() -> Iterator[str]:
    """An endless stream served from a thread of its own (its own ``trio.run``): the
    client's run then counts only the tasks of the client and its turns."""
    ready = threading.Event()
    found: list[tuple[str, trio.lowlevel.TrioToken, trio.Event]] = []

    async def serve() -> None:
        async with open_replay_server(Reply.endless(b"data: T tok\n\n", delay=0.0005)) as server:
            stop = trio.Event()
            found.append((server.url, trio.lowlevel.current_trio_token(), stop))
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    ready.wait(10)
    url, token, stop = found[0]
    yield url
    trio.from_thread.run_sync(stop.set, trio_token=token)
    thread.join(10)


def living() -> int:
    return trio.lowlevel.current_statistics().tasks_living


@settings(max_examples=examples(40), deadline=None)
@given(
    after=st.integers(0, 30),
    how=st.sampled_from(["break", "cancel", "timer"]),
    fused=st.booleans(),
)
def test_cancellation_a_dropped_default_turn_leaves_no_living_task(
    endless_url: str, after: int, how: str, fused: bool
) -> None:
    """A turn without user stages (fused: the consumer's task reads the socket) dropped
    after ``after`` items, by ``break``, by cancelling the consumer's scope mid-read, or
    by a timer: right after the stream's block, trio has exactly the tasks it had before
    the client opened (no ``close asyncgen ... (abandoned)`` task of httpx's left to
    trio's finalizer)."""

    async def main() -> tuple[int, int, int]:
        before = living()
        async with CucaClient(FAKE, base_url=endless_url, fused=fused) as client:
            with trio.move_on_after(0.0005 * after if how == "timer" else 30) as scope:
                async with client.generate_stream(REQUEST) as stream:
                    seen = 0
                    async for _ in stream:
                        seen += 1
                        if seen > after and how == "break":
                            break
                        if seen > after and how == "cancel":
                            scope.cancel()
            assert scope.cancelled_caught or how == "break"
            right_after = living()
        return before, right_after, living()

    before, right_after, closed = trio.run(main)
    assert right_after == before
    assert closed == before


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    with LocalModel.load(default_model_path(), n_ctx=512, sampling=SamplingConfig(seed=3)) as m:
        yield m


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drop=drops(local=True))
def test_cancellation_local_drop_at_any_hop_leaves_nothing(model: LocalModel, drop: Drop) -> None:
    """A local turn dropped anywhere: the engine's thread stops, no task is left, and the
    model serves the next turn."""
    if drop.hop == "engine" or drop.hop == "output_parse":
        drop = Drop(drop.hop, min(drop.index, 8))  # messages are batches of tokens
    request = UnifiedRequest.new("smollm2").add_user_message("Tell a story.").set_max_tokens(200)

    async def main() -> None:
        async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
            await client.generate(request.set_max_tokens(1))  # the engine's thread exists
            outcome = await drive(client, request, drop)
            after = await client.generate(request.set_max_tokens(3))
        if outcome.completed:  # the turn ended before reaching that index: no drop
            assert outcome.leaks == ()
        else:
            assert_dropped_cleanly(outcome)
        assert after.response.usage is not None
        assert after.response.usage.completion_tokens == 3

    trio.run(main)


async def test_cancellation_client_is_usable_after_a_drop() -> None:
    replies = [Reply.endless(b"data: T tok\n\n"), Reply(frames("ok"))]
    async with open_replay_server(replies) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            async with client.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break
            done = await client.generate(REQUEST)
            assert done.text == "ok"


def test_cancellation_a_leaked_task_is_seen() -> None:
    """The leak check itself can fail: a stage that starts a task that outlives the turn."""

    async def main() -> Outcome:
        async with open_replay_server(Reply(frames("a", "b"))) as server:
            async with trio.open_nursery() as outside:

                async def leaky(receive, send):  # type: ignore[no-untyped-def]
                    async with send:
                        async for batch in receive:
                            outside.start_soon(trio.sleep, 0.5, name="leaked-by-a-stage")
                            await send.send(batch)

                from cuca.stages import after

                client = CucaClient(FAKE, base_url=server.url, stages=[after("decode", leaky)])
                async with client:
                    outcome = await drive(client, REQUEST)
                outside.cancel_scope.cancel()
        return outcome

    outcome = trio.run(main)
    assert outcome.completed
    assert any("leaked-by-a-stage" in leak for leak in outcome.leaks), outcome.leaks
