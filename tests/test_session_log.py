"""cuca.SessionLog: every turn in one SQLite file, over real loopback HTTP; concurrent
turns, a killed process, `cuca logs`, and replaying a logged turn."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from support.transcripts import transcript

from cuca import (
    ConfigurationError,
    CucaClient,
    CucaError,
    CucaPlugin,
    ProviderEndpoint,
    RetryPolicy,
    SessionLog,
    Text,
    UnifiedRequest,
    merge_blocks,
)
from cuca.testing import Reply, chunk_sizes, logged_reply, open_replay_server

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TEXT = transcript("openai/text")
ANSWER = "I'm unable to provide real-time weather updates."


def openai(url: str, *plugins: CucaPlugin, **options: object) -> CucaClient:
    return CucaClient(
        ProviderEndpoint.OPENAI, base_url=url + "/v1", api_key="k", plugins=plugins, **options
    )


def ask(text: str = "hi") -> UnifiedRequest:
    return UnifiedRequest.new("gpt-4o").add_user_message(text)


async def test_session_log_records_every_part_of_a_turn(tmp_path: Path) -> None:
    with SessionLog(tmp_path / "log.db", raw=True) as log:
        async with open_replay_server(Reply(TEXT, chunks=[7] * 40)) as server:
            async with openai(server.url, log) as client:
                done = await client.generate(ask().set_max_tokens(50))
        (turn,) = log.turns()
    assert turn.status == "ok"
    assert (turn.provider, turn.model) == ("openai", "gpt-4o")
    assert turn.request == ask().set_max_tokens(50).with_provider(ProviderEndpoint.OPENAI)
    assert turn.blocks == done.blocks == (Text(ANSWER),)  # nine deltas, merged
    assert (turn.errors, turn.error) == ((), None)
    assert turn.usage == done.response.usage
    assert turn.prompt_cache_usage == done.response.prompt_cache_usage
    assert turn.finish_reason == "stop"
    assert turn.cost == done.response.cost and turn.cost is not None
    assert turn.first_block_seconds is not None and turn.total_seconds is not None
    assert 0 < turn.first_block_seconds <= turn.total_seconds
    assert turn.raw == TEXT


async def test_session_log_keeps_raw_bytes_only_when_asked(tmp_path: Path) -> None:
    with SessionLog(tmp_path / "log.db") as log:
        async with open_replay_server(Reply(TEXT)) as server:
            async with openai(server.url, log) as client:
                await client.generate(ask())
        (turn,) = log.turns()
    assert turn.raw is None
    with pytest.raises(ValueError, match="turn 1 has no raw bytes"):
        logged_reply(turn)


async def test_session_log_records_error_items_and_the_error_that_ended_a_turn(
    tmp_path: Path,
) -> None:
    malformed = transcript("anthropic/malformed_tool")
    refused = Reply(b'{"error": {"message": "slow down"}}', status=429)
    with SessionLog(tmp_path / "log.db") as log:
        async with open_replay_server([Reply(malformed), refused]) as server:
            async with CucaClient(
                ProviderEndpoint.ANTHROPIC, base_url=server.url, api_key="k", plugins=[log]
            ) as client:
                done = await client.generate(ask())
                with pytest.raises(CucaError) as raised:
                    await client.generate(ask(), retry=RetryPolicy(max_retries=0))
        first, second = log.turns()
    (item,) = done.errors
    assert first.status == "ok"
    assert first.errors == ({"kind": type(item).__name__, "message": str(item)},)
    assert second.status == "error"
    assert second.error == {"kind": type(raised.value).__name__, "message": str(raised.value)}
    assert "slow down" in second.error["message"]
    assert second.usage is None and second.cost is None


async def test_session_log_marks_a_dropped_turn_cancelled(tmp_path: Path) -> None:
    frame = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    with SessionLog(tmp_path / "log.db") as log:
        async with open_replay_server(Reply.endless(frame, delay=0.001)) as server:
            async with openai(server.url, log) as client:
                async with client.generate_stream(ask()) as stream:
                    async for _ in stream:
                        break
        (turn,) = log.turns()
    assert turn.status == "cancelled"
    (block,) = turn.blocks
    assert isinstance(block, Text) and block.text and set(block.text) == {"x"}
    assert turn.usage is None and turn.error is None


async def test_session_log_records_what_the_consumer_sees(tmp_path: Path) -> None:
    """A plugin that rewrites blocks runs before the log: the log holds its output."""

    class Shout(CucaPlugin):
        async def on_stream_chunk(self, block):  # type: ignore[no-untyped-def]
            return Text(block.text.upper()) if isinstance(block, Text) else block

    with SessionLog(tmp_path / "log.db") as log:
        async with open_replay_server(Reply(TEXT)) as server:
            async with openai(server.url, Shout(), log) as client:
                await client.generate(ask())
        (turn,) = log.turns()
    assert "".join(b.text for b in turn.blocks if isinstance(b, Text)) == ANSWER.upper()


async def test_session_log_200_concurrent_turns_lose_nothing(tmp_path: Path) -> None:
    results: dict[str, str] = {}
    with SessionLog(tmp_path / "log.db", raw=True) as log:
        async with open_replay_server(Reply(TEXT, chunks=[5] * 20, delay=0.001)) as server:
            async with openai(server.url, log) as client:

                async def one(index: int) -> None:
                    done = await client.generate(ask(f"turn {index}"))
                    results[f"turn {index}"] = done.text

                async with trio.open_nursery() as nursery:
                    for index in range(200):
                        nursery.start_soon(one, index)
        turns = log.turns()
    assert len(results) == 200
    assert len(turns) == 200
    assert sorted(t.request.messages[0].text() for t in turns) == sorted(results)
    for turn in turns:
        assert turn.status == "ok"
        assert "".join(b.text for b in turn.blocks if isinstance(b, Text)) == ANSWER
        assert turn.raw == TEXT
        assert turn.usage is not None and turn.usage.prompt_tokens == 1117


async def test_session_log_survives_a_process_killed_mid_turn(tmp_path: Path) -> None:
    """SIGKILL during a turn: the file opens, every finished turn is whole, and the one
    that was streaming reads back as interrupted."""
    db = tmp_path / "log.db"
    three_frames = sum(len(frame) + 2 for frame in TEXT.split(b"\n\n")[:3])
    replies = [Reply(TEXT)] * 3 + [Reply(TEXT, stall_after=three_frames)]
    async with open_replay_server(replies) as server:
        child = await trio.lowlevel.open_process(
            [sys.executable, str(SCRIPTS / "session_log_child.py"), str(db), server.url, "3"],
            stdout=subprocess.PIPE,
        )
        assert child.stdout is not None
        seen = b""
        with trio.fail_after(30):
            while b"streaming" not in seen:
                chunk = await child.stdout.receive_some()
                assert chunk, seen
                seen += chunk
        child.send_signal(signal.SIGKILL)
        await child.wait()
        await child.stdout.aclose()
    assert child.returncode == -signal.SIGKILL
    assert seen.count(b"done") == 3
    with SessionLog(db) as log:
        turns = log.turns()
    assert [t.status for t in turns] == ["ok", "ok", "ok", "interrupted"]
    for index, turn in enumerate(turns[:3]):
        assert turn.request.messages[0].text() == f"turn {index}"
        assert "".join(b.text for b in turn.blocks if isinstance(b, Text)) == ANSWER
        assert turn.raw == TEXT
    assert turns[3].request.messages[0].text() == "the last turn"
    assert turns[3].blocks == () and turns[3].usage is None


@settings(deadline=None, max_examples=20)
@given(data=st.data())
async def test_logged_reply_replays_a_turn_at_any_chunking(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    path = tmp_path_factory.mktemp("log") / "log.db"
    with SessionLog(path, raw=True) as log:
        async with open_replay_server(Reply(TEXT)) as server:
            async with openai(server.url, log) as client:
                recorded = await client.generate(ask())
        (turn,) = log.turns()
    sizes = data.draw(chunk_sizes(len(TEXT)))
    async with open_replay_server(logged_reply(turn, chunks=sizes)) as server:
        async with openai(server.url) as client:
            replayed = await client.generate(turn.request)
    assert replayed.message == recorded.message
    # the same record, but for the server that answered (two servers, two URLs)
    assert attrs.evolve(replayed.response, endpoint=None) == attrs.evolve(
        recorded.response, endpoint=None
    )


def cuca_logs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cuca", "logs", *args], capture_output=True, text=True
    )


async def test_cuca_logs_lists_shows_and_prints_json(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    with SessionLog(db, raw=True) as log:
        async with open_replay_server(Reply(TEXT)) as server:
            async with openai(server.url, log) as client:
                for index in range(3):
                    await client.generate(ask(f"question {index}"))
    listed = await trio.to_thread.run_sync(cuca_logs, str(db), "--limit", "2")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["2", "3"]
    assert "  ok  openai/gpt-4o  1117/46  $" in lines[0]
    assert lines[0].endswith("I'm unable to provide real-time weather updates.")

    shown = await trio.to_thread.run_sync(cuca_logs, str(db), "2")
    assert shown.returncode == 0, shown.stderr
    assert "[user] question 1" in shown.stdout
    assert ANSWER in shown.stdout.splitlines()

    as_json = await trio.to_thread.run_sync(cuca_logs, str(db), "--json", "--raw")
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["id"] for r in records] == [1, 2, 3]
    assert records[0]["blocks"] == [{"type": "Text", "value": ANSWER}]
    assert records[0]["raw"].encode() == TEXT
    assert records[0]["usage"] == {"prompt_tokens": 1117, "completion_tokens": 46,
                                   "reasoning_tokens": 0}  # fmt: skip

    missing = await trio.to_thread.run_sync(cuca_logs, str(db), "9")
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"cuca: error: no turn 9 in {db}"
    nofile = await trio.to_thread.run_sync(cuca_logs, str(tmp_path / "none.db"))
    assert nofile.returncode == 2
    assert "no session log at" in nofile.stderr


@pytest.mark.parametrize(
    ("provider", "name", "suffix"),
    [
        (ProviderEndpoint.ANTHROPIC, "anthropic/thinking_two_tools", ""),
        (ProviderEndpoint.ANTHROPIC, "anthropic/redacted_thinking", ""),
        (ProviderEndpoint.ANTHROPIC, "anthropic/malformed_tool", ""),
        (ProviderEndpoint.GOOGLE_GEMINI, "gemini/thoughts_parallel_calls", ""),
        (ProviderEndpoint.GOOGLE_GEMINI, "gemini/text_signature", ""),
    ],
)
async def test_session_log_blocks_are_exactly_the_streamed_items(
    tmp_path: Path, provider: ProviderEndpoint, name: str, suffix: str
) -> None:
    """Thinking with signatures, tool calls, signed text and error items interleaved with
    plain text deltas: every block comes back, merged exactly as `merge_blocks` does."""
    streamed: list[object] = []
    with SessionLog(tmp_path / "log.db") as log:
        async with open_replay_server(Reply(transcript(name), chunks=[3] * 50)) as server:
            async with CucaClient(
                provider, base_url=server.url + suffix, api_key="k", plugins=[log]
            ) as client:
                async with client.generate_stream(ask()) as stream:
                    streamed = [item async for item in stream]
        (turn,) = log.turns()
    blocks = [i for i in streamed if not isinstance(i, CucaError)]
    errors = [i for i in streamed if isinstance(i, CucaError)]
    assert turn.blocks == merge_blocks(blocks)
    assert list(turn.errors) == [{"kind": type(e).__name__, "message": str(e)} for e in errors]
    assert any(not isinstance(b, Text) or b.signature for b in blocks)  # not just plain text


async def test_session_log_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    """The user sees ``configuration error: cannot open the session log notes.txt: file
    is not a database``, from the library and from ``cuca logs``."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database, " * 100)
    with pytest.raises(ConfigurationError, match=r"cannot open the session log .*notes\.txt"):
        SessionLog(path)
    shown = await trio.to_thread.run_sync(cuca_logs, str(path))
    assert shown.returncode == 2
    assert shown.stderr.startswith("cuca: error: cannot open the session log ")
    assert "not a database" in shown.stderr and "Traceback" not in shown.stderr
    assert path.read_text() == "not a database, " * 100  # untouched


async def test_session_log_closed_refuses_instead_of_waiting(tmp_path: Path) -> None:
    """Once closed, no writer thread is left: a new turn's record is refused with a
    ``ConfigurationError`` naming the file, and reading neither waits for it nor hangs."""
    log = SessionLog(tmp_path / "log.db")
    log.close()
    with pytest.raises(ConfigurationError, match=r"cannot write the session log .*closed"):
        log.observe(UnifiedRequest.new("m").add_user_message("hi"))
    with trio.fail_after(10):
        await trio.to_thread.run_sync(log.flush, abandon_on_cancel=True)


async def test_session_log_and_traces_on_a_local_engine_turn(tmp_path: Path) -> None:
    """The in-process engine has no transport: no raw bytes, everything else is logged,
    its exact usage included; no price for a model on your own hardware."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cuca import LocalModel
    from cuca.engine import default_model_path
    from cuca.observers.otel import OtelPlugin

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    request = UnifiedRequest.new("smollm2").add_user_message("Name a colour.").set_max_tokens(8)
    with LocalModel.load(default_model_path(), n_ctx=1024) as model:
        with SessionLog(tmp_path / "log.db", raw=True) as log:
            async with CucaClient(
                ProviderEndpoint.LOCAL, local_model=model,
                plugins=[log, OtelPlugin(tracer_provider=provider)],
            ) as client:
                done = await client.generate(request)
            (turn,) = log.turns()
    assert turn.status == "ok" and turn.provider == "local"
    assert turn.blocks == done.blocks and done.text
    assert turn.usage == done.response.usage and turn.usage is not None
    assert turn.prompt_cache_usage == done.response.prompt_cache_usage
    assert turn.raw is None and turn.cost is None
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["gen_ai.provider.name"] == "local"
    assert span.attributes["gen_ai.usage.output_tokens"] == turn.usage.completion_tokens


async def test_cuca_chat_log_records_turns_that_cuca_logs_shows(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    async with open_replay_server(Reply(TEXT)) as server:
        for prompt in ("first question", "second question"):
            args = ["chat", "--provider", "openai", "--base-url", server.url + "/v1",
                    "--api-key", "sk-test", "--model", "gpt-4o", "--log", str(db),
                    prompt]  # fmt: skip
            result = await trio.run_process(
                [sys.executable, "-m", "cuca", *args], capture_stdout=True, capture_stderr=True
            )
            assert result.stdout.decode() == ANSWER + "\n"
    listed = await trio.to_thread.run_sync(cuca_logs, str(db))
    lines = listed.stdout.splitlines()
    assert len(lines) == 2 and all("  ok  openai/gpt-4o  1117/46  $" in line for line in lines)
    with SessionLog(db) as log:
        turns = log.turns()
    assert [t.request.messages[-1].text() for t in turns] == ["first question", "second question"]


async def test_cuca_logs_shows_a_tool_loops_steps_with_their_results(tmp_path: Path) -> None:
    """A tool loop logs a turn per step; `cuca logs` shows each step's calls with the
    results the loop sent back, in the list and in the turn shown in full."""
    from support.wire_replies import chat_call, chat_text

    def weather(city: str) -> str:
        """Current weather of a city."""
        return f"{city}: 18 C\nlight rain"

    def fail(reason: str) -> str:
        """Always fails."""
        raise ValueError(reason)

    db = tmp_path / "loop.db"
    two_calls = chat_call("weather", {"city": "Paris"}, "call_1")
    replies = [Reply(two_calls), Reply(chat_call("fail", {"reason": "no key"}, "call_2")),
               Reply(chat_text("Rain in Paris."))]  # fmt: skip
    with SessionLog(db) as log:
        async with open_replay_server(replies) as server, openai(server.url, log) as client:
            async with client.run_tools(ask("Weather?"), [weather, fail]) as stream:
                async for _ in stream:
                    pass
    listed = await trio.to_thread.run_sync(cuca_logs, str(db))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].endswith('weather({"city": "Paris"}) -> Paris: 18 C light rain')
    assert lines[1].endswith('fail({"reason": "no key"}) -> error: ValueError: no key')
    assert lines[2].endswith("Rain in Paris.")
    shown = await trio.to_thread.run_sync(cuca_logs, str(db), "1")
    assert shown.returncode == 0, shown.stderr
    body = shown.stdout.splitlines()
    at = body.index('[tool call] weather({"city": "Paris"})')
    assert body[at + 1] == "[tool result call_1] Paris: 18 C light rain"
