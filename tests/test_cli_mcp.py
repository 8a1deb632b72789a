"""``cuca chat --mcp`` and ``--mcp-http``: the servers' tools given to the model, the loop
run, each call and each result printed on a line of its own."""

from __future__ import annotations

import shlex
import sys

from support.mcp_servers import SCRIPT, answer_reply, calls_reply, http_server, tool_messages
from test_cli import assert_one_error_line, cuca, err, openai_args, out

from cuca.testing import open_replay_server

OURS = shlex.join([sys.executable, SCRIPT])


async def test_cli_mcp_runs_the_loop_and_prints_calls_and_results() -> None:
    replies = [
        calls_reply(("get_weather", {"city": "Paris"}), ("fail", {"reason": "no\nkey"})),
        answer_reply("Rain in Paris."),
    ]
    async with open_replay_server(replies) as server:
        result = await cuca(*openai_args(server.url, "--mcp", OURS, "Weather in Paris?"))
        requests = server.requests
    assert result.returncode == 0, err(result)
    lines = out(result).splitlines()
    assert lines[:2] == [
        '[tool call] get_weather({"city": "Paris"})',
        '[tool call] fail({"reason": "no\\nkey"})',
    ]
    assert sorted(lines[2:4]) == [  # in the order the calls end
        "[tool error call_1] refused: no\\nkey",
        "[tool result call_0] Paris: 18 C, light rain",
    ]
    assert lines[4:] == ["Rain in Paris."]
    assert {t["function"]["name"] for t in requests[0].json()["tools"]} >= {"echo", "get_weather"}
    assert tool_messages(requests[1].json())["call_0"] == "Paris: 18 C, light rain"


async def test_cli_mcp_http_gives_that_servers_tools() -> None:
    async with http_server() as url, open_replay_server(
        [calls_reply(("echo", {"text": "over http"})), answer_reply()]
    ) as server:
        result = await cuca(*openai_args(server.url, "--mcp-http", url, "Echo."))
    assert result.returncode == 0, err(result)
    assert "[tool result call_0] over http" in out(result).splitlines()


async def test_cli_mcp_server_that_cannot_start_is_one_error_line() -> None:
    async with open_replay_server(answer_reply()) as server:
        result = await cuca(*openai_args(server.url, "--mcp", "cuca-no-such-server --x", "Hi"))
        assert server.requests == []
    assert_one_error_line(result, 1, "mcp error (cuca-no-such-server --x)", "cannot start")


async def test_cli_mcp_two_servers_with_one_tool_name_exit_2_before_any_request() -> None:
    async with open_replay_server(answer_reply()) as server:
        result = await cuca(*openai_args(server.url, "--mcp", OURS, "--mcp", OURS, "Hi"))
        assert server.requests == []
    assert_one_error_line(result, 2, "two tools are named 'echo'")


async def test_cli_mcp_empty_command_is_a_usage_error() -> None:
    result = await cuca(*openai_args("http://127.0.0.1:9", "--mcp", " ", "Hi"))
    assert_one_error_line(result, 2, "--mcp needs a command")
