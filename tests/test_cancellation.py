"""Dropping a stream at any point ends the whole turn: no task, no open connection."""

from __future__ import annotations

from typing import Any

import trio
import trio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.fake_adapter import FAKE

from cuca import CucaClient, UnifiedRequest
from cuca.stages import HTTP_POINTS
from cuca.testing import Reply, open_replay_server

REQUEST = UnifiedRequest.new("fake-model").add_user_message("hi")


def all_tasks() -> list[trio.lowlevel.Task]:
    found: list[trio.lowlevel.Task] = []

    def walk(task: trio.lowlevel.Task) -> None:
        found.append(task)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())  # type: ignore[arg-type]
    return found


def turn_tasks() -> list[str]:
    names = {*HTTP_POINTS, "_run"}
    return [t.name for t in all_tasks() if t.name.rsplit(".", 1)[-1] in names]


class Stop(Exception):
    pass


@settings(max_examples=examples(25), deadline=None)
@given(
    how=st.sampled_from(["break", "raise", "cancel", "cancel_before"]),
    after_items=st.integers(0, 300),
    delay=st.floats(0, 0.02),
    pace=st.sampled_from([0.0, 0.001]),
)
async def test_cancellation_drop_anywhere_leaves_nothing(
    how: str, after_items: int, delay: float, pace: float
) -> None:
    async with open_replay_server(Reply.endless(b"data: T tok\n\n", delay=pace)) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            with trio.fail_after(10):
                seen = await drop(client, how, after_items, delay)
                assert turn_tasks() == [], "a task of the turn outlived generate_stream"
                await server.wait_connections_closed()
            assert server.open_connections == 0
            assert seen <= after_items + 1 or how.startswith("cancel")


async def drop(client: CucaClient, how: str, after_items: int, delay: float) -> int:
    seen = 0
    if how == "cancel_before":
        with trio.move_on_after(delay):
            async with client.generate_stream(REQUEST):
                await trio.sleep_forever()
        return seen
    if how == "cancel":
        with trio.move_on_after(delay):
            async with client.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    seen += 1
        return seen
    try:
        async with client.generate_stream(REQUEST) as stream:
            async for _ in stream:
                seen += 1
                if seen > after_items:
                    if how == "raise":
                        raise Stop
                    break
    except Stop:
        pass
    return seen


async def test_cancellation_client_is_usable_after_a_drop() -> None:
    from support.fake_adapter import frames

    replies = [Reply.endless(b"data: T tok\n\n"), Reply(frames("ok"))]
    async with open_replay_server(replies) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            async with client.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break
            done = await client.generate(REQUEST)
            assert done.text == "ok"


async def test_cancellation_tasks_are_named_after_stages() -> None:
    """The leak check above relies on stage task names: make sure they are visible."""
    names: list[Any] = []
    async with open_replay_server(Reply.endless(b"data: T tok\n\n")) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            async with client.generate_stream(REQUEST) as stream:
                await stream.__anext__()
                names = turn_tasks()
    # request_hooks and encode have already finished once the first block arrived
    assert set(HTTP_POINTS[2:]) <= {n.rsplit(".", 1)[-1] for n in names}
