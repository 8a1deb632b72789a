"""The local engine neither mangles nor silently drops: a cut character is dropped (never
U+FFFD), and what the model cannot do (tools, reasoning, a context size llama.cpp would
change, a turn whose model was closed) is a typed error. Turns run through the public
client, as a user runs them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from cuca import (
    Completion,
    ConfigurationError,
    CucaClient,
    ProviderEndpoint,
    StreamIncomplete,
    Text,
    UnifiedRequest,
)
from cuca.engine import LocalModel, default_model_path

EMOJIS = UnifiedRequest.new("smollm2").add_user_message("Reply with only five emojis.")


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    with LocalModel.load(default_model_path(), n_ctx=512) as loaded:
        yield loaded


async def generate(model: LocalModel, request: UnifiedRequest) -> Completion:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        return await client.generate(request)


async def test_engine_inputs_a_cap_never_cuts_a_character_into_u_fffd(model: LocalModel) -> None:
    """SmolLM2 writes each 4-byte emoji as 3 tokens: most caps fall inside one. At every
    cap the text is a clean prefix of the uncapped answer, and usage counts every token."""
    full = (await generate(model, EMOJIS.set_temperature(0).set_max_tokens(40))).text
    assert full.startswith("🌟🌟🌟")  # the emoji-heavy answer the caps cut into
    previous, inside = "", 0
    for cap in range(1, 25):
        done = await generate(model, EMOJIS.set_temperature(0).set_max_tokens(cap))
        assert "\ufffd" not in done.text, (cap, done.text)  # was "🌟🌟\ufffd" at cap 8
        assert full.startswith(done.text), (cap, done.text)
        assert done.response.usage is not None
        assert done.response.usage.completion_tokens == cap  # the cut tokens still count
        inside += done.text == previous  # this cap's last token ended inside a character
        previous = done.text
    assert inside >= 8  # two caps in three fall inside an emoji


async def test_engine_inputs_tools_on_a_model_without_tool_syntax_are_refused(
    model: LocalModel,
) -> None:
    assert not model.capabilities().tools
    request = EMOJIS.add_tool("get_weather", "Weather for a city", {"type": "object"})
    with pytest.raises(ConfigurationError) as info:
        await generate(model, request)
    assert str(info.value) == (
        "configuration error: the model SmolLM2-135M-Instruct.Q4_1.gguf has no tool-call "
        "syntax cuca can read (capabilities().tools is false), so its 1 tool(s) would be "
        "left out of the prompt: remove them, or load a model that calls tools"
    )


async def test_engine_inputs_thinking_on_a_model_that_cannot_reason_is_refused(
    model: LocalModel,
) -> None:
    assert not model.capabilities().reasoning
    with pytest.raises(ConfigurationError) as info:
        await generate(model, EMOJIS.set_thinking(True))
    assert str(info.value) == (
        "configuration error: the model SmolLM2-135M-Instruct.Q4_1.gguf cannot reason "
        "(capabilities().reasoning is false): leave thinking unset or off for it"
    )
    done = await generate(model, EMOJIS.set_thinking(False).set_max_tokens(3))
    assert done.response.usage is not None and done.response.usage.completion_tokens == 3


def test_engine_inputs_a_context_size_llama_cpp_would_change_is_refused() -> None:
    with pytest.raises(ConfigurationError) as info:
        LocalModel.load(default_model_path(), n_ctx=64)
    assert str(info.value) == (
        "configuration error: n_ctx=64 would silently become 256 (llama.cpp sizes the "
        "context in steps of 256 tokens): pass n_ctx=256"
    )


async def test_engine_inputs_closing_the_model_mid_turn_is_an_incomplete_stream() -> None:
    """Not a clean end with finish_reason "cancelled": the answer was cut short."""
    loaded = LocalModel.load(default_model_path(), n_ctx=512)
    request = EMOJIS.set_max_tokens(400).set_temperature(0)
    items: list[object] = []
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=loaded) as client:
        with pytest.raises(StreamIncomplete) as info:
            async with client.generate_stream(request) as stream:
                async for item in stream:
                    items.append(item)
                    if len(items) == 1:
                        await trio.to_thread.run_sync(loaded.close)
    assert str(info.value) == "transport error: the local model was closed during the turn"
    assert isinstance(items[0], Text) and stream.response is None
