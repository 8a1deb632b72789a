"""Plugin hooks: order and error rules."""

from __future__ import annotations

from typing import Any

import pytest
from support.fake_adapter import FAKE, frames

from cuca import (
    Block,
    CucaClient,
    CucaPlugin,
    PluginError,
    ProviderError,
    Text,
    UnifiedRequest,
    UnifiedResponse,
)
from cuca.testing import Reply, open_replay_server

REQUEST = UnifiedRequest.new("fake-model").add_user_message("hi")


class Recorder(CucaPlugin):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        self.log.append(f"{self.name}:request")
        return request.set_max_tokens((request.max_tokens or 0) + 1)

    async def on_stream_chunk(self, block: Block) -> Block | None:
        self.log.append(f"{self.name}:chunk")
        return block

    async def on_response_complete(self, response: UnifiedResponse) -> None:
        self.log.append(f"{self.name}:done")


async def run(plugins: list[CucaPlugin], body: bytes) -> tuple[list[Any], Any]:
    async with open_replay_server(Reply(body)) as server:
        async with CucaClient(FAKE, base_url=server.url, plugins=plugins) as client:
            async with client.generate_stream(REQUEST) as stream:
                items = [item async for item in stream]
    return items, stream


async def test_plugins_run_in_registration_order() -> None:
    log: list[str] = []
    _, stream = await run([Recorder("a", log), Recorder("b", log)], frames("x"))
    assert log == ["a:request", "b:request", "a:chunk", "b:chunk", "a:done", "b:done"]
    assert stream.request.max_tokens == 2  # each on_request saw the previous one's result


async def test_plugins_chunk_hook_can_rewrite_and_drop() -> None:
    class Shout(CucaPlugin):
        name = "shout"

        async def on_stream_chunk(self, block: Block) -> Block | None:
            if isinstance(block, Text) and block.text == "drop":
                return None
            return Text(block.text.upper()) if isinstance(block, Text) else block

    items, _ = await run([Shout()], frames("a", "drop", "b"))
    assert items == [Text("A"), Text("B")]


async def test_plugins_chunk_hook_error_is_an_item_and_the_block_is_dropped() -> None:
    class Picky(CucaPlugin):
        name = "picky"

        async def on_stream_chunk(self, block: Block) -> Block | None:
            if isinstance(block, Text) and block.text == "b":
                raise ValueError("no b")
            return block

    log: list[str] = []
    items, stream = await run([Picky(), Recorder("after", log)], frames("a", "b", "c"))
    assert items == [
        Text("a"),
        PluginError("picky", "on_stream_chunk failed: ValueError: no b"),
        Text("c"),
    ]
    assert log.count("after:chunk") == 2  # later plugins never saw the failed block
    assert stream.response is not None  # the turn still ended cleanly


async def test_plugins_response_complete_error_is_a_final_item() -> None:
    class Late(CucaPlugin):
        name = "late"

        async def on_response_complete(self, response: UnifiedResponse) -> None:
            raise RuntimeError("bookkeeping failed")

    items, stream = await run([Late()], frames("a"))
    assert items == [
        Text("a"),
        PluginError("late", "on_response_complete failed: RuntimeError: bookkeeping failed"),
    ]
    assert stream.response is not None


async def test_plugins_response_complete_not_called_after_fatal_error() -> None:
    log: list[str] = []
    async with open_replay_server(Reply(b"data: T a\n\ndata: F boom\n\n")) as server:
        async with CucaClient(FAKE, base_url=server.url, plugins=[Recorder("r", log)]) as client:
            with pytest.raises(ProviderError, match="boom") as caught:
                async with client.generate_stream(REQUEST) as stream:
                    async for _ in stream:
                        pass
    assert caught.value == ProviderError("fake", "boom")  # the fatal frame's own error
    assert stream.response is None
    assert log == ["r:request", "r:chunk"]  # the block before the error went through
