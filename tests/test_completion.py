"""What a finished turn hands back: ``Completion.usage``, ``tool_calls`` and
``finish_reason``; ``stream.message``, assembled as the stream goes by the one
assembler the tool loop and the session log use too; and what ``async for`` straight
on a turn says."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.transcripts import transcript

from cuca import (
    ConfigurationError,
    CucaClient,
    ProviderEndpoint,
    SessionLog,
    Text,
    Thinking,
    ToolCall,
    UnifiedRequest,
    merge_blocks,
)
from cuca.assemble import BlockAssembler
from cuca.testing import Reply, open_replay_server
from cuca.types import Block, ImageBase64

ASK = UnifiedRequest.new("gpt-4o").add_user_message("Weather in Edinburgh, and AAPL?")


def openai(url: str, **options: object) -> CucaClient:
    return CucaClient(ProviderEndpoint.OPENAI, base_url=url + "/v1", api_key="k", **options)


async def test_completion_has_usage_tool_calls_and_finish_reason() -> None:
    async with open_replay_server(Reply(transcript("openai/parallel_tool_calls"))) as server:
        async with openai(server.url) as client:
            done = await client.generate(ASK)
    assert [call.name for call in done.tool_calls] == ["GetWeatherArgs", "get_stock_price"]
    assert done.tool_calls == tuple(b for b in done.message.content if isinstance(b, ToolCall))
    assert done.finish_reason == "tool_calls" == done.response.finish_reason
    assert done.usage is not None and done.usage == done.response.usage
    assert done.usage.prompt_tokens > 0


@pytest.mark.parametrize(
    ("name", "provider", "path", "total"),
    [
        ("openai/text", ProviderEndpoint.OPENAI, "/v1", 1163),
        ("llama_cpp/chat_tool_call", ProviderEndpoint.LLAMA_CPP, "", 79),
        ("gemini/text_signature", ProviderEndpoint.GOOGLE_GEMINI, "", 334),
        ("gemini/tool_call", ProviderEndpoint.GOOGLE_GEMINI, "", 848),
    ],
)
async def test_completion_usage_total_tokens_is_the_vendors_total(
    name: str, provider: ProviderEndpoint, path: str, total: int
) -> None:
    """``usage.total_tokens`` reads as the vendor's own ``total_tokens`` /
    ``totalTokenCount`` (thoughts and tool-use prompts included on Gemini)."""
    async with open_replay_server(Reply(transcript(name))) as server:
        async with CucaClient(provider, base_url=server.url + path, api_key="k") as client:
            done = await client.generate(ASK)
    assert done.usage is not None and done.usage.total_tokens == total


async def test_completion_of_a_text_answer_has_no_tool_calls() -> None:
    async with open_replay_server(Reply(transcript("openai/text"), chunks=[5] * 80)) as server:
        async with openai(server.url) as client:
            done = await client.generate(ASK)
    assert done.tool_calls == ()
    assert done.finish_reason == "stop"


async def test_stream_message_is_what_generate_returns_and_goes_on_to_the_next_turn() -> None:
    reply = Reply(transcript("openai/text"), chunks=[3] * 200)  # many small deltas
    async with open_replay_server(reply) as server:
        async with openai(server.url) as client:
            async with client.generate_stream(ASK) as stream:
                shown = [item.text async for item in stream if isinstance(item, Text)]
            done = await client.generate(ASK)
    assert len(shown) > 1  # streamed as deltas...
    assert stream.message == done.message  # ...handed back merged, as generate does
    assert stream.message.content == (Text("".join(shown)),)
    follow = ASK.add_message(stream.message).add_user_message("And tomorrow?")
    assert follow.messages[-2] == done.message


async def test_stream_message_before_the_end_says_to_read_the_stream_first() -> None:
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        async with openai(server.url) as client:
            async with client.generate_stream(ASK) as stream:
                with pytest.raises(ConfigurationError, match="once the stream has ended"):
                    stream.message  # noqa: B018
                async for _ in stream:
                    pass
    assert stream.message.text()


async def test_stream_message_keeps_signed_thinking_as_the_session_log_and_generate_do(
    tmp_path: Path,
) -> None:
    """Signed blocks stay apart the same way in the stream, ``generate`` and the log."""
    reply = Reply(transcript("anthropic/thinking"), chunks=[4] * 2000)
    with SessionLog(tmp_path / "log.db") as log:
        async with open_replay_server(reply) as server:
            async with CucaClient(
                ProviderEndpoint.ANTHROPIC, base_url=server.url, api_key="k", plugins=[log]
            ) as client:
                async with client.generate_stream(ASK) as stream:
                    async for _ in stream:
                        pass
                done = await client.generate(ASK)
        first, _ = log.turns()
    assert any(isinstance(b, Thinking) and b.signature for b in stream.message.content)
    assert stream.message == done.message
    assert first.blocks == stream.message.content


async def test_stream_iterated_without_async_with_says_what_to_write() -> None:
    async with CucaClient(ProviderEndpoint.OPENAI, base_url="http://127.0.0.1:9/v1") as client:
        with pytest.raises(ConfigurationError) as info:
            async for _ in client.generate_stream(ASK):  # type: ignore[attr-defined]
                pass
        assert "write `async with client.generate_stream(request) as stream:`" in str(info.value)
        with pytest.raises(ConfigurationError, match=r"async with client\.run_tools"):
            async for _ in client.run_tools(ASK, tools=[]):  # type: ignore[attr-defined]
                pass


# -- the assembler ------------------------------------------------------------------------

SIGNED = Text("s", signature="sig")


def test_merge_blocks_never_joins_unsigned_text_after_a_signed_text() -> None:
    assert merge_blocks([Text("a"), Text("b"), SIGNED, Text("c")]) == (
        Text("abs", signature="sig"),
        Text("c"),
    )


def test_merge_blocks_keeps_tool_calls_and_redacted_thinking_apart() -> None:
    call = ToolCall("c1", "f", {})
    redacted = Thinking("", signature="x", redacted=True)
    blocks = [Thinking("a"), Thinking("b"), call, redacted, Thinking("c"), Text("d")]
    assert merge_blocks(blocks) == (Thinking("ab"), call, redacted, Thinking("c"), Text("d"))


_TEXTS = st.text(alphabet="ab", max_size=3)
_BLOCKS: st.SearchStrategy[Block] = st.one_of(
    st.builds(Text, _TEXTS),
    st.builds(Text, _TEXTS, st.sampled_from(["s1", "s2"])),
    st.builds(Thinking, _TEXTS),
    st.builds(Thinking, _TEXTS, st.sampled_from([None, "t1"])),
    st.builds(Thinking, _TEXTS, id=st.just("rs_1")),
    st.builds(ToolCall, st.just("c"), st.just("f"), st.just({})),
    st.just(ImageBase64("image/png", "AA==")),
)


@given(st.lists(_BLOCKS, max_size=30), st.lists(st.integers(1, 5), max_size=30))
def test_assembler_fed_in_any_pieces_equals_merge_blocks(
    blocks: list[Block], sizes: list[int]
) -> None:
    one_by_one, in_pieces = BlockAssembler(), BlockAssembler()
    for block in blocks:
        one_by_one.add(block)
    rest = list(blocks)
    for size in sizes:
        in_pieces.feed([*rest[:size], ConfigurationError("an error item, skipped")])
        in_pieces.blocks()  # a look half-way changes nothing
        rest = rest[size:]
    in_pieces.feed(rest)
    merged = merge_blocks(blocks)
    assert one_by_one.blocks() == in_pieces.blocks() == merged
    # nothing lost, nothing reordered: the texts of each kind, in order
    for kind in (Text, Thinking):
        texts = ["".join(b.text for b in seq if type(b) is kind) for seq in (merged, blocks)]  # type: ignore[union-attr]
        assert texts[0] == texts[1]
    # a signature ends its run: one merged block per signed delta, never two fused
    def signed(seq: tuple[Block, ...] | list[Block]) -> list[str | None]:
        return [b.signature for b in seq if isinstance(b, Text | Thinking) and b.signature]

    assert signed(merged) == signed(blocks)
