"""``cuca chat --mcp`` and ``--mcp-http``: the servers' tools given to the model, the loop
run, each call and each result printed on a line of its own."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from support.mcp_servers import SCRIPT, answer_reply, calls_reply, http_server, tool_messages
from test_cli import assert_one_error_line, cuca, err, local, openai_args, out

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


# -- the reference server, as docs/cli.md and docs/mcp.md show it ----------------------

DOCS = Path(__file__).resolve().parents[1] / "docs"
ON_PATH = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
"""``pip install mcp-server-time`` puts the command beside ``python``: on PATH, as in an
activated virtualenv."""


async def test_cli_mcp_reference_time_server_runs_as_the_docs_show() -> None:
    command = '--provider openai --mcp mcp-server-time "What time is it in Paris?"'
    assert f"cuca chat {command}" in (DOCS / "cli.md").read_text()
    assert f"cuca chat {command}" in (DOCS / "mcp.md").read_text()
    replies = [
        calls_reply(("get_current_time", {"timezone": "Europe/Paris"})),
        answer_reply("It is 9:41 in Paris."),
    ]
    async with open_replay_server(replies) as server:
        args = openai_args(server.url, "--mcp", "mcp-server-time", "What time is it in Paris?")
        result = await cuca(*args, env=ON_PATH)
    assert result.returncode == 0, err(result)
    call, told, answer = out(result).splitlines()
    assert call == '[tool call] get_current_time({"timezone": "Europe/Paris"})'
    assert told.startswith('[tool result call_0] {\\n  "timezone": "Europe/Paris",\\n  "datetime"')
    assert told.split('"datetime"')[0] in (DOCS / "cli.md").read_text()
    assert answer == "It is 9:41 in Paris."


@local
async def test_cli_mcp_default_model_has_no_tool_syntax_and_exits_2() -> None:
    """What docs/cli.md says: the default local model cannot call tools; the command
    says so and exits 2 before any turn."""
    result = await cuca("chat", "--mcp", "mcp-server-time", "What time is it in Paris?",
                        env=ON_PATH)  # fmt: skip
    assert_one_error_line(result, 2, "has no tool-call syntax", "2 tool(s)")
    assert out(result) == ""
    assert err(result).splitlines()[-1] in (DOCS / "cli.md").read_text()
