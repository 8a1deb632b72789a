"""CucaPlugin.observe: a turn observer sees the request, the raw bytes, every item and
the end of every turn, and one that fails ends the turn with a PluginError."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from support.transcripts import transcript

from cuca import (
    CucaClient,
    CucaError,
    CucaPlugin,
    PluginError,
    ProviderEndpoint,
    Text,
    TurnObserver,
    TurnOutcome,
    UnifiedRequest,
)
from cuca.stages import HTTP_POINTS, after, map_items
from cuca.testing import Reply, open_replay_server

TEXT = transcript("openai/text")


class Recorder(TurnObserver):
    def __init__(self, raw: bool, fail: str = "") -> None:
        self.raw = raw
        self.fail = fail
        self.chunks: list[bytes] = []
        self.items: list[object] = []
        self.ends: list[TurnOutcome] = []

    def on_raw(self, chunks: Sequence[bytes]) -> None:
        self.chunks.extend(chunks)

    def on_items(self, items: Sequence[object]) -> None:
        if self.fail == "on_items":
            raise OSError("disk full")
        self.items.extend(items)

    def on_end(self, end: TurnOutcome) -> None:
        self.ends.append(end)


class Watcher(CucaPlugin):
    name = "watcher"

    def __init__(self, raw: bool = False, fail: str = "") -> None:
        self.raw, self.fail = raw, fail
        self.observes_raw = raw
        self.observers: list[Recorder] = []
        self.requests: list[UnifiedRequest] = []

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        if self.fail == "observe":
            raise RuntimeError("no observer today")
        self.requests.append(request)
        self.observers.append(Recorder(self.raw, self.fail))
        return self.observers[-1]


class Tag(CucaPlugin):
    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        return request.set_max_tokens(7)


async def run(*plugins: CucaPlugin, **options: object) -> tuple[list[object], object]:
    async with open_replay_server(Reply(TEXT, chunks=[9] * 30)) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k",
            plugins=plugins, **options,  # type: ignore[arg-type]
        ) as client:
            items: list[object] = []
            async with client.generate_stream(UnifiedRequest.new("gpt-4o")) as stream:
                async for item in stream:
                    items.append(item)
            return items, stream.response


async def test_observer_sees_the_final_request_raw_bytes_items_and_end() -> None:
    watcher = Watcher(raw=True)
    shout = after("chunk_hooks", map_items(lambda b: Text(b.text.upper())), "shout")
    items, response = await run(Tag(), watcher, stages=[shout])
    (request,) = watcher.requests
    assert request.max_tokens == 7  # after every on_request hook
    (observer,) = watcher.observers
    assert b"".join(observer.chunks) == TEXT
    assert observer.items == items  # what the consumer got, after the user's stage
    assert "".join(i.text for i in items if isinstance(i, Text)) == (
        "I'M UNABLE TO PROVIDE REAL-TIME WEATHER UPDATES."
    )
    assert observer.ends == [TurnOutcome("ok", response)]


async def test_observer_without_raw_gets_no_bytes() -> None:
    watcher = Watcher(raw=False)
    await run(watcher)
    assert watcher.observers[0].chunks == []


@pytest.mark.parametrize("hook", ["observe", "on_items"])
async def test_failing_observer_ends_the_turn_with_a_plugin_error(hook: str) -> None:
    """The user sees ``plugin error (watcher): on_items failed: OSError: disk full``."""
    with pytest.raises(PluginError) as raised:
        await run(Watcher(fail=hook))
    message = "no observer today" if hook == "observe" else "OSError: disk full"
    assert f"{hook} failed" in str(raised.value) and message in str(raised.value)
    assert "watcher" in str(raised.value)


async def test_observer_sees_the_error_that_ended_a_turn() -> None:
    watcher = Watcher()
    async with open_replay_server(Reply(b'{"error": {"message": "nope"}}', status=400)) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k", plugins=[watcher]
        ) as client:
            with pytest.raises(CucaError) as raised:
                await client.generate(UnifiedRequest.new("gpt-4o"))
    (end,) = watcher.observers[0].ends
    assert end.status == "error" and end.error is raised.value and end.response is None


def test_observers_add_no_stage() -> None:
    """Observers meet a turn at its seams, never as stages: a client with observing
    plugins (one asking for raw bytes too) runs the same pipeline as a plain one (the
    raw bytes reach only a plugin that asks: test_observer_without_raw_gets_no_bytes)."""

    def names(*plugins: CucaPlugin) -> tuple[str, ...]:
        return CucaClient(ProviderEndpoint.OPENAI, api_key="k", plugins=plugins).pipeline().names

    assert names(Tag()) == names(Watcher()) == names(Watcher(raw=True)) == HTTP_POINTS
