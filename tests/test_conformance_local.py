"""The conformance suite, where it applies to the in-process engine.

There is no wire, so no truncation or HTTP error; what carries over: any text the model
writes, split into any token pieces, ends in blocks or typed error items and nothing
else; and dropping a turn at a random point leaves no thread and a usable model.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples

from cuca import (
    CucaClient,
    CucaError,
    LocalModel,
    ProviderEndpoint,
    SamplingConfig,
    Text,
    Thinking,
    ToolCallError,
    UnifiedRequest,
    merge_blocks,
)
from cuca.engine import default_model_path
from cuca.engine.formats import OutputFormat, ToolSyntax
from cuca.engine.output import OutputParser

FORMATS = {
    "plain": OutputFormat(reasoning=None),
    "think": OutputFormat(),
    "hermes": OutputFormat(tool_syntax=ToolSyntax.HERMES),
    "llama3": OutputFormat(reasoning=None, tool_syntax=ToolSyntax.LLAMA3_JSON),
    "mistral": OutputFormat(reasoning=("[THINK]", "[/THINK]"), tool_syntax=ToolSyntax.MISTRAL),
    "open_think": OutputFormat(tool_syntax=ToolSyntax.HERMES, starts_in_thinking=True),
}
# pieces a model writes, markers included, so that Hypothesis combines them
PIECES = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[THINK]",
    "[/THINK]",
    '{"name": "f", "arguments": ',
    '{"a": 1}',
    "}",
    "]",
    "[",
    "{",
    '"',
    "\\",
    "\n",
    " ",
    "hello",
    "[1,2]",
    "tool.call(x=1)",
    "\ud800",
    "é",
]
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=6), max_size=30).map("".join)


def ids() -> Iterator[str]:
    return (f"call_{n:016x}" for n in itertools.count())


def parse(fmt: OutputFormat, pieces: list[str]) -> list[object]:
    counter = ids()
    parser = OutputParser(fmt, thinking_enabled=True, id_factory=lambda: next(counter))
    items: list[object] = []
    for piece in pieces:
        items += parser.feed(piece)
    return items + parser.close()


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, cuts=st.lists(st.integers(0, 200), max_size=10))
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_conformance_local_any_output_gives_blocks_or_typed_errors(
    name: str, text: str, cuts: list[int]
) -> None:
    fmt = FORMATS[name]
    edges = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(edges)]
    items = parse(fmt, pieces)
    for item in items:
        assert isinstance(item, CucaError | Text) or type(item).__name__ in (
            "Thinking",
            "ToolCall",
        ), repr(item)
        if isinstance(item, Thinking):  # every Thinking names the provider that made it
            assert item.provider == ProviderEndpoint.LOCAL
        if isinstance(item, CucaError):  # a broken call can still be answered by its id
            assert isinstance(item, ToolCallError) and item.tool_call_id
    assert merged(items) == merged(parse(fmt, [text]))  # the split never changes the output


def merged(items: list[object]) -> tuple[object, ...]:
    """Text and Thinking deltas merged (a split may cut a delta in two)."""
    errors = tuple(i for i in items if isinstance(i, CucaError))
    return (*merge_blocks([i for i in items if not isinstance(i, CucaError)]), *errors)  # type: ignore[list-item]


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    with LocalModel.load(default_model_path(), n_ctx=1024, sampling=SamplingConfig(seed=7)) as m:
        yield m


async def test_conformance_local_random_drops_leave_no_thread(model: LocalModel) -> None:
    request = UnifiedRequest.new("smollm2").add_user_message("Tell a story.").set_max_tokens(64)
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        await client.generate(request.set_max_tokens(1))  # the worker thread exists
        threads = threading.active_count()
        for i in range(8):
            with trio.move_on_after(0.01 * i):
                async with client.generate_stream(request) as stream:
                    async for _ in stream:
                        if i % 2:
                            break
            with trio.fail_after(10):
                while threading.active_count() > threads:
                    await trio.sleep(0.01)
        done = await client.generate(request.set_max_tokens(4))
    assert done.response.usage is not None
    assert done.response.usage.completion_tokens == 4
