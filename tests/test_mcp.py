"""MCP servers' tools in the tool loop (``cuca.mcp``), over real processes and sockets.

The reference ``mcp-server-time`` (installed by ``make install-test``) runs over stdio
in a loop against the replay server; our own server (``support/mcp_server.py``, built
with the SDK's server side) runs over stdio and streamable HTTP for the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import mcp_types as types
import pytest
import trio
from support.mcp_servers import (
    SCRIPT,
    TIME_SERVER,
    answer_reply,
    calls_reply,
    http_server_process,
    ours,
    tool_messages,
)

from cuca import (
    ConfigurationError,
    CucaClient,
    McpError,
    ProviderEndpoint,
    ToolFailed,
    ToolResult,
    UnifiedRequest,
)
from cuca.mcp import McpServer
from cuca.mcp.content import result_text
from cuca.mcp.server import model_name
from cuca.testing import Reply, open_replay_server

REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("Use the tools.")
TRANSPORTS = ["stdio", "http"]


async def loop(replies: list[Reply], tools: list[Any], **options: Any) -> tuple[list[Any], Any]:
    """Run a tool loop on the replay server: its items and the requests it sent."""
    async with open_replay_server(replies) as replay:
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=replay.url, api_key="k") as c:
            async with c.run_tools(REQUEST, tools, **options) as stream:
                items = [item async for item in stream]
        return items, replay.requests


def results(items: list[Any]) -> dict[str, ToolResult]:
    return {item.tool_call_id: item for item in items if isinstance(item, ToolResult)}


async def test_mcp_time_server_result_reaches_the_model() -> None:
    command, args = TIME_SERVER
    async with McpServer.stdio(command, args) as server:
        assert server.name == "mcp-time"
        tools = await server.tools()
        assert {"get_current_time", "convert_time"} <= {tool.name for tool in tools}
        replies = [calls_reply(("get_current_time", {"timezone": "Europe/Paris"})), answer_reply()]
        items, requests = await loop(replies, tools)
    assert len(requests) == 2
    declared = {t["function"]["name"] for t in requests[0].json()["tools"]}
    assert "get_current_time" in declared
    sent = json.loads(tool_messages(requests[1].json())["call_0"])
    assert sent["timezone"] == "Europe/Paris"
    told = datetime.fromisoformat(sent["datetime"])
    now = datetime.now(ZoneInfo("Europe/Paris"))
    assert told.utcoffset() == now.utcoffset() and abs((now - told).total_seconds()) < 120
    assert results(items)["call_0"].is_error is False


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mcp_server_handshake_and_paginated_tools(transport: str) -> None:
    async with ours(transport, "--page-size", "3") as server:
        assert (server.name, server.version) == ("cuca-test", "1.0.0")
        assert server.protocol_version
        if transport == "stdio":  # the command line or the URL, as errors name it
            assert server.label == f"{sys.executable} {SCRIPT} --page-size 3"
        else:
            assert server.label.startswith("http://127.0.0.1:")
        tools = await server.tools()
    names = [tool.name for tool in tools]
    assert names[:3] == ["echo", "get_weather", "add"] and len(names) == 14  # 5 pages
    echo = tools[0]
    assert echo.description == "Say the text back."
    assert echo.schema["properties"] == {"text": {"type": "string"}}


async def test_mcp_tools_prefix_keeps_the_servers_name_for_the_call() -> None:
    async with ours("stdio") as server:
        tools = await server.tools(prefix="ours")
        assert tools[0].name == "ours_echo"
        items, _ = await loop([calls_reply(("ours_echo", {"text": "hi"})), answer_reply()], tools)
    assert results(items)["call_0"].output == "hi"


def test_mcp_tool_names_become_names_every_vendor_accepts() -> None:
    assert model_name("git.status/v2") == "git_status_v2"
    assert model_name("ok-name_1") == "ok-name_1"
    assert model_name("x" * 80) == "x" * 64


def test_mcp_without_the_sdk_says_which_extra_to_install() -> None:
    code = "import sys; sys.modules['mcp'] = None; import cuca.mcp"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "ImportError: cuca.mcp needs the MCP SDK: pip install 'cuca[mcp]'" in result.stderr


async def test_mcp_name_collision_is_a_configuration_error_before_any_request() -> None:
    async with ours("stdio") as first, ours("stdio") as second:
        tools = [*await first.tools(), *await second.tools()]
        async with open_replay_server(answer_reply()) as replay:
            async with CucaClient(ProviderEndpoint.OPENAI, base_url=replay.url, api_key="k") as c:
                with pytest.raises(ConfigurationError, match="two tools are named 'echo'"):
                    async with c.run_tools(REQUEST, tools):
                        pass
            assert replay.requests == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mcp_list_changed_next_tools_sees_the_new_list(transport: str) -> None:
    async with ours(transport) as server:
        tools = {tool.name: tool for tool in await server.tools()}
        assert "extra" not in tools
        assert await tools["grow"].call({}) == "grown"
        with trio.fail_after(30):  # (a hang guard) the notification may land just after the result
            while "extra" not in {tool.name for tool in await server.tools()}:
                await trio.sleep(0.01)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mcp_results_text_structured_image_and_is_error(transport: str) -> None:
    async with ours(transport) as server:
        replies = [
            calls_reply(
                ("get_weather", {"city": "Paris"}),
                ("add", {"a": 2, "b": 3}),
                ("picture", {}),
                ("fail", {"reason": "no key"}),
                ("forecast", {"city": "Oslo"}),
            ),
            answer_reply(),
        ]
        items, requests = await loop(replies, await server.tools())
    got = results(items)
    # a text that only points at the structured content is followed by its JSON
    pointed = 'See the structured content.\n{"city": "Oslo", "celsius": 18}'
    assert got["call_4"] == ToolResult("call_4", pointed)
    assert tool_messages(requests[1].json())["call_4"] == pointed
    assert got["call_0"] == ToolResult("call_0", "Paris: 18 C, light rain")
    assert got["call_1"] == ToolResult("call_1", '{"sum": 5}')
    assert got["call_2"] == ToolResult("call_2", "a pixel:\n[image: image/png, 70 bytes]")
    assert got["call_3"] == ToolResult("call_3", "refused: no key", is_error=True)
    assert tool_messages(requests[1].json())["call_3"] == "refused: no key"


def test_mcp_result_text_resources_and_structured_beside_text() -> None:
    link = types.ResourceLink(type="resource_link", name="notes", uri="file:///notes.txt")
    embedded = types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(uri="file:///a.txt", text="inline text"),
    )
    blob = types.EmbeddedResource(
        type="resource",
        resource=types.BlobResourceContents(uri="file:///b.bin", blob="AAECAw==", mime_type="x/y"),
    )
    result = types.CallToolResult(content=[link, embedded, blob])
    assert result_text(result).splitlines() == [
        "[resource link: notes file:///notes.txt]",
        "inline text",
        "[resource: file:///b.bin, x/y, 4 bytes]",
    ]
    both = types.CallToolResult(
        content=[types.TextContent(type="text", text='{"a": 1}')], structured_content={"a": 1}
    )
    assert result_text(both) == '{"a": 1}'  # the text already carries it: not said twice
    indented = types.CallToolResult(
        content=[types.TextContent(type="text", text='{\n  "a": 1\n}')], structured_content={"a": 1}
    )
    assert result_text(indented) == '{\n  "a": 1\n}'  # the same value, however it is laid out
    pointer = types.CallToolResult(
        content=[types.TextContent(type="text", text="see the structured content")],
        structured_content={"a": 1},
    )
    assert result_text(pointer) == 'see the structured content\n{"a": 1}'
    other = types.CallToolResult(
        content=[types.TextContent(type="text", text='{"a": 2}')], structured_content={"a": 1}
    )
    assert result_text(other) == '{"a": 2}\n{"a": 1}'  # a different value: both


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mcp_timeout_cancels_the_call_at_the_server(transport: str) -> None:
    async with ours(transport) as server:
        tools = await server.tools()
        items, _ = await loop([calls_reply(("slow", {})), answer_reply()], tools, tool_timeout=0.5)
        assert results(items)["call_0"] == ToolResult("call_0", "timed out after 0.5 s", True)
        count = {tool.name: tool for tool in tools}["cancellations"]
        with trio.fail_after(30):  # (a hang guard) the server handles it on its own time
            while await count.call({}) != "1":
                await trio.sleep(0.01)
        assert await tools[0].call({"text": "still here"}) == "still here"


async def test_mcp_concurrent_calls_share_one_session() -> None:
    async with ours("http") as server:
        tools = await server.tools()
        calls = [("echo", {"text": str(n)}) for n in range(8)]
        with trio.fail_after(30):
            items, _ = await loop([calls_reply(*calls), answer_reply()], tools)
    assert {k: r.output for k, r in results(items).items()} == {
        f"call_{n}": str(n) for n in range(8)
    }


async def test_mcp_server_killed_mid_call_is_an_error_result_then_mcp_error() -> None:
    async with ours("stdio") as server:
        tools = await server.tools()
        items, _ = await loop([calls_reply(("die", {})), answer_reply()], tools)
        result = results(items)["call_0"]
        assert result.is_error and "McpError" in result.output
        assert "the server closed the connection" in result.output
        with pytest.raises(McpError, match="the session has ended") as caught:
            await server.tools()
        assert "cuca-test MCP server starting" in caught.value.stderr
        with pytest.raises(McpError):
            await tools[0].call({"text": "anyone?"})


async def test_mcp_http_server_gone_between_calls_is_an_error_result_not_a_crash() -> None:
    async with http_server_process() as (url, process), McpServer.http(url) as server:
        tools = await server.tools()
        process.kill()
        await process.wait()
        items, requests = await loop([calls_reply(("echo", {"text": "hi"})), answer_reply()], tools)
        result = results(items)["call_0"]
        assert result.is_error and "the session has ended" in result.output
        assert len(requests) == 2  # the loop went on: the model read the error
        with pytest.raises(McpError, match="the session has ended"):
            await server.tools()


async def test_mcp_stdio_env_and_cwd_reach_the_child(tmp_path: Any) -> None:
    env = {"CUCA_TEST": "from-env"}
    async with McpServer.stdio(sys.executable, [SCRIPT], env=env, cwd=tmp_path) as server:
        assert await server.call_tool("where", {}) == f"from-env {tmp_path}"


async def test_mcp_http_headers_go_with_every_request() -> None:
    async with (
        http_server_process() as (url, _),
        McpServer.http(url, headers={"X-Cuca-Test": "token-1"}) as server,
    ):
        assert await server.call_tool("header", {}) == "token-1"


async def test_mcp_http_server_unreachable_is_an_mcp_error() -> None:
    with pytest.raises(McpError) as caught:
        async with McpServer.http("http://127.0.0.1:9/mcp"):
            pass
    assert str(caught.value).startswith(
        "mcp error (http://127.0.0.1:9/mcp): cannot connect: ConnectError"
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mcp_dropped_loop_cancels_the_call_at_the_server(transport: str) -> None:
    async with ours(transport) as server:
        tools = {tool.name: tool for tool in await server.tools()}
        async with open_replay_server(calls_reply(("slow", {}))) as replay:
            async with CucaClient(ProviderEndpoint.OPENAI, base_url=replay.url, api_key="k") as c:
                # dropped once the call runs at the server (not after a delay, which a
                # busy machine may spend before the call is even sent)
                with trio.CancelScope() as dropped:
                    async with trio.open_nursery() as nursery:

                        async def drop_once_started() -> None:
                            with trio.fail_after(30):
                                while await tools["started"].call({}) != "1":
                                    await trio.sleep(0.01)
                            dropped.cancel()

                        nursery.start_soon(drop_once_started)
                        async with c.run_tools(REQUEST, list(tools.values())) as stream:
                            async for _ in stream:
                                pass
                assert dropped.cancelled_caught
        with trio.fail_after(30):  # a guard against a hang, not a measure
            while await tools["cancellations"].call({}) != "1":
                await trio.sleep(0.01)


async def test_mcp_leaving_the_block_stops_the_process() -> None:
    try:
        async with ours("stdio") as server:
            tools = {tool.name: tool for tool in await server.tools()}
            pid = int(await tools["pid"].call({}))
            raise ValueError("the block's own error")
    except ValueError as exc:  # comes out as it was raised, not in a group
        assert str(exc) == "the block's own error"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_mcp_missing_command_is_an_mcp_error() -> None:
    with pytest.raises(McpError) as caught:
        async with McpServer.stdio("cuca-no-such-mcp-server", ["--flag"]):
            pass
    assert str(caught.value) == (
        "mcp error (cuca-no-such-mcp-server --flag): cannot start the command: "
        "No such file or directory"
    )


async def test_mcp_server_that_exits_at_start_shows_its_stderr() -> None:
    code = "import sys; print('config file missing: ~/.srv.toml', file=sys.stderr); sys.exit(3)"
    with pytest.raises(McpError, match="initialize failed") as caught:
        async with McpServer.stdio(sys.executable, ["-c", code]):
            pass
    assert caught.value.stderr == ("config file missing: ~/.srv.toml",)
    assert "its last stderr lines: config file missing" in str(caught.value)


async def test_mcp_server_that_never_answers_initialize_times_out_and_is_stopped() -> None:
    """A server that starts and never answers: McpError after connect_timeout, and no
    process is left running. Found by a marker in its command line (a pid file it
    wrote could be missing: on a busy machine, python may not run a line in 0.5 s)."""
    marker = f"cuca-test-never-answers-{uuid.uuid4().hex}"
    code = f"import time; time.sleep(60)  # {marker}"
    with pytest.raises(McpError, match=r"no answer to initialize within 0.5 s"):
        async with McpServer.stdio(sys.executable, ["-c", code], connect_timeout=0.5):
            pass
    left = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                left.append(entry.name)
    assert left == [], f"still running: {left}"


async def test_mcp_error_answer_is_a_tool_failure_for_the_model() -> None:
    async with ours("stdio") as server:
        with pytest.raises(ToolFailed, match=r"^error from the server: .*unknown tool: nope"):
            await server.call_tool("nope", {})
        assert await server.call_tool("echo", {"text": "usable"}) == "usable"
