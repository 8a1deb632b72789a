"""One table of insertion points: the docs show it, the client builds both pipelines from
it, and a stage in the wrong place is caught by mypy and, at run time, by a PluginError
naming it. Custom stages and ``tap`` on local turns."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from support.fake_adapter import FAKE, frames

from cuca import CucaClient, PluginError, ProviderEndpoint, Text, UnifiedRequest
from cuca.engine import (
    GenerationEnd,
    GenerationStart,
    LocalModel,
    SamplingConfig,
    default_model_path,
)
from cuca.stages import (
    HTTP_PIPELINE,
    HTTP_POINTS,
    LOCAL_PIPELINE,
    LOCAL_POINTS,
    EndOfTurn,
    ResponseHead,
    after,
    before,
    map_items,
    tap,
)
from cuca.testing import Reply, open_replay_server

ROOT = Path(__file__).resolve().parents[1]
REQUEST = UnifiedRequest.new("fake-model").add_user_message("hi")


def docs_table() -> list[tuple[str, ...]]:
    """The rows of the table under '## The stages' in docs/pipeline.md."""
    page = (ROOT / "docs" / "pipeline.md").read_text()
    section = page.split("## The stages", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [tuple(cell.strip() for cell in row.strip("|").split(" | ")) for row in rows]


def test_points_docs_show_the_table() -> None:
    points = list(dict.fromkeys([*HTTP_PIPELINE, *LOCAL_PIPELINE]))
    expected = [(f"`{p.name}`", p.reads, p.writes, p.what) for p in points]
    assert docs_table() == expected


def test_points_the_client_builds_both_pipelines_from_the_table() -> None:
    http = CucaClient(FAKE).pipeline()
    assert http.names == HTTP_POINTS == tuple(p.name for p in HTTP_PIPELINE)

    class Generator:  # what the engine's stages need from a model; never run here
        turn_lock = trio.Lock()

    client = CucaClient(ProviderEndpoint.LOCAL, local_model=Generator())  # type: ignore[arg-type]
    local = client.pipeline()
    assert local.names == LOCAL_POINTS == tuple(p.name for p in LOCAL_PIPELINE)


def test_points_built_in_stages_share_one_task_and_a_user_stage_splits_it() -> None:
    client = CucaClient(FAKE)
    assert client.pipeline().tasks() == (HTTP_POINTS,)
    split = client.pipeline([after("transport", tap(print), name="spy")])
    assert split.tasks() == (HTTP_POINTS[:3], ("spy",), HTTP_POINTS[3:])


def test_points_as_actors_every_point_with_work_is_a_task() -> None:
    """Without plugins the two hook points have nothing to do: no task for them."""
    split = CucaClient(FAKE).pipeline([after("transport", tap(print), name="spy")])
    assert split.tasks(fused=False) == (
        *((name,) for name in HTTP_POINTS[1:3]),
        ("spy",),
        *((name,) for name in HTTP_POINTS[3:5]),
    )


@pytest.mark.parametrize(
    ("insertion", "message"),
    [
        (
            after("decode", map_items(lambda item: "oops"), name="stringify"),
            "stage 'stringify' sent a str to 'chunk_hooks', which reads blocks, non-fatal "
            "CucaErrors, then an EndOfTurn",
        ),
        (
            before("sse_parse", map_items(lambda chunk: chunk.decode()), name="decoder"),
            "stage 'decoder' sent a str to 'sse_parse', which reads ResponseHead, bytes",
        ),
    ],
)
async def test_points_a_wrong_item_type_is_a_plugin_error_naming_the_stage(
    insertion: Any, message: str
) -> None:
    """What the user sees: the turn ends with a PluginError that names their stage and
    the stage it fed, not a TypeError from inside a decoder."""
    async with open_replay_server(Reply(frames("a", "b"))) as server:
        async with CucaClient(FAKE, base_url=server.url, stages=[insertion]) as client:
            with pytest.raises(PluginError) as info:
                await client.generate(REQUEST)
    assert info.value.plugin == insertion.name
    assert info.value.message == message


async def test_points_a_stage_that_drops_the_end_of_turn_is_reported() -> None:
    async def drop_end(receive: Any, send: Any) -> None:
        async with send:
            async for batch in receive:
                await send.send([item for item in batch if not isinstance(item, EndOfTurn)])

    async with open_replay_server(Reply(frames("a"))) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            with pytest.raises(PluginError, match="without its EndOfTurn"):
                await client.generate(REQUEST, stages=[after("chunk_hooks", drop_end)])


async def test_points_tap_sees_every_item_of_an_http_turn() -> None:
    seen: list[Any] = []
    async with open_replay_server(Reply(frames("a", "b"), chunks=[5])) as server:
        async with CucaClient(FAKE, base_url=server.url) as client:
            spies = [after("transport", tap(seen.append)), after("decode", tap(seen.append))]
            done = await client.generate(REQUEST, stages=spies)
    assert done.text == "ab"
    heads = [item for item in seen if isinstance(item, ResponseHead)]
    assert len(heads) == 1 and heads[0].status == 200 and heads[0].request.model == "fake-model"
    assert b"".join(item for item in seen if isinstance(item, bytes)) == frames("a", "b")
    assert [item for item in seen if isinstance(item, Text)] == [Text("a"), Text("b")]
    assert isinstance(seen[-1], EndOfTurn)
    assert seen[-1].response() == done.response


# -- mypy ---------------------------------------------------------------------------


def _typed_tree(tmp_path: Path) -> Path:
    """cuca as an installed package would lay it out (mypy does not follow setuptools'
    editable finder): the ``cuca`` folder, with ``stages``, ``providers`` and ``engine``
    linked in."""
    site = tmp_path / "site"
    package = site / "cuca"
    package.mkdir(parents=True)
    for entry in (ROOT / "cuca").iterdir():
        (package / entry.name).symlink_to(entry)
    for folder in ("stages", "providers", "engine"):
        (package / folder).symlink_to(ROOT / folder)
    return site


STAGE = """
from collections.abc import Sequence

import trio

from cuca.stages import DECODE, TRANSPORT, ResponseHead, after


async def count_bytes(
    receive: trio.MemoryReceiveChannel[Sequence[ResponseHead | bytes]],
    send: trio.MemorySendChannel[Sequence[ResponseHead | bytes]],
) -> None:
    async with send:
        async for batch in receive:
            await send.send(batch)

"""


@pytest.mark.slow
def test_points_mypy_catches_a_stage_in_the_wrong_place(tmp_path: Path) -> None:
    """A byte counter typed for the bytes hop type-checks after TRANSPORT, and is an
    error after DECODE (which writes blocks)."""
    site = _typed_tree(tmp_path)
    (tmp_path / "right.py").write_text(STAGE + "after(TRANSPORT, count_bytes)\n")
    (tmp_path / "wrong.py").write_text(STAGE + "after(DECODE, count_bytes)\n")

    def mypy(name: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
        command += ["--cache-dir", str(tmp_path / ".mypy"), name]
        env = {**os.environ, "MYPYPATH": str(site)}
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)

    right = mypy("right.py")
    assert right.returncode == 0, right.stdout
    wrong = mypy("wrong.py")
    assert wrong.returncode == 1, wrong.stdout
    last = len((tmp_path / "wrong.py").read_text().splitlines())
    assert re.search(rf'wrong\.py:{last}: error: Argument 2 to "after"', wrong.stdout)


# -- local turns ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> Any:
    with LocalModel.load(default_model_path(), n_ctx=1024, sampling=SamplingConfig(seed=7)) as m:
        yield m


async def test_points_tap_after_engine_sees_the_engine_records(model: LocalModel) -> None:
    """docs/local-engine.md promises after("engine", ...): a stage there sees a
    GenerationStart (with the request as sent), one str per token and a GenerationEnd."""
    seen: list[Any] = []
    request = UnifiedRequest.new("smollm2").add_user_message("Say hi.").set_max_tokens(6)
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        done = await client.generate(request, stages=[after("engine", tap(seen.append))])
    assert isinstance(seen[0], GenerationStart)
    assert seen[0].request is not None and seen[0].request.model == "smollm2"
    assert isinstance(seen[-1], GenerationEnd)
    tokens = [item for item in seen if isinstance(item, str)]
    assert len(tokens) == seen[-1].completion_tokens == 6
    assert done.response.usage is not None and done.response.usage.completion_tokens == 6


async def test_points_custom_stage_after_output_parse_rewrites_local_blocks(
    model: LocalModel,
) -> None:
    def shout(item: Any) -> Any:
        return Text(item.text.upper()) if isinstance(item, Text) else item

    request = UnifiedRequest.new("smollm2").add_user_message("Say hi.").set_max_tokens(8)
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        plain = await client.generate(request)
        loud = await client.generate(request, stages=[after("output_parse", map_items(shout))])
    assert plain.text and loud.text == plain.text.upper()
    assert loud.response.finish_reason == plain.response.finish_reason


async def test_points_wrong_item_on_a_local_turn_is_a_plugin_error(model: LocalModel) -> None:
    request = UnifiedRequest.new("smollm2").add_user_message("Say hi.").set_max_tokens(4)
    stray = after("engine", map_items(lambda item: 42 if isinstance(item, str) else item), "ints")
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        with pytest.raises(PluginError, match="stage 'ints' sent a int to 'output_parse'"):
            await client.generate(request, stages=[stray])
