"""The request's stop, seed, top_p and tool_choice on the local engine, and its finish
reasons, as a user of ``CucaClient(ProviderEndpoint.LOCAL, ...)`` sees them.

SmolLM2 135M, greedy where the test compares texts (greedy decoding is deterministic),
with the ChatML template that has Hermes-style tools (``tests/templates/chatml_tools.jinja``)
for the tool choices.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.models import load_model

from cuca import (
    Completion,
    ConfigurationError,
    CucaClient,
    FinishReason,
    ProviderEndpoint,
    ToolCall,
    ToolChoice,
    UnifiedRequest,
)
from cuca.engine import LocalModel, SamplingConfig
from cuca.engine.sampling import SamplerStep

TEMPLATE = Path(__file__).resolve().parent / "templates" / "chatml_tools.jinja"
THINKING_CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{{ m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
)
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    with load_model("smollm2", n_ctx=2048, sampling=SamplingConfig(seed=1)) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def tools_model() -> Iterator[LocalModel]:
    template = TEMPLATE.read_text()
    with load_model("smollm2", n_ctx=2048, chat_template=template) as loaded:
        yield loaded


def ask(text: str = "Tell me about the city of Paris.", max_tokens: int = 24) -> UnifiedRequest:
    return UnifiedRequest.new("smollm2").add_user_message(text).set_max_tokens(max_tokens)


async def generate(model: LocalModel, request: UnifiedRequest) -> Completion:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        return await client.generate(request)


async def test_local_stop_ends_the_answer_before_the_sequence_with_exact_usage(
    model: LocalModel,
) -> None:
    greedy = ask().set_temperature(0)
    full = await generate(model, greedy)
    words = full.text.split()
    assert len(words) > 4, full.text
    stop = " " + words[3]  # a sequence in the middle of the answer, split over tokens
    cut = full.text.index(stop)
    done = await generate(model, greedy.set_stop(["never written", stop]))
    assert done.text == full.text[:cut]
    assert (done.finish_reason, done.response.provider_finish_reason) == (
        FinishReason.STOP,
        "stop_sequence",
    )
    # the tokens sampled: as many as a run capped there needs to write the sequence
    needed = 1
    while stop not in (await generate(model, greedy.set_max_tokens(needed))).text:
        needed += 1
    assert done.usage is not None and done.usage.completion_tokens == needed


async def test_local_text_that_begins_a_stop_sequence_is_shown_when_it_ends_otherwise(
    model: LocalModel,
) -> None:
    greedy = ask().set_temperature(0).set_max_tokens(6)
    full = await generate(model, greedy)
    tail = full.text[-2:]
    done = await generate(model, greedy.set_stop(tail + "\u2603"))  # never completed
    assert done.text == full.text
    assert (done.finish_reason, done.response.provider_finish_reason) == ("length", "length")


async def test_local_request_seed_and_top_p_win_over_the_model_defaults(
    model: LocalModel,
) -> None:
    sampled = ask().set_temperature(1.0)
    assert model.prepare(sampled.set_seed(7).set_top_p(0.5)).steps == (
        SamplerStep("top_k", 40),
        SamplerStep("top_p", 0.5),
        SamplerStep("temp", 1.0),
        SamplerStep("dist", 7),
    )
    first = await generate(model, sampled.set_seed(7))
    again = await generate(model, sampled.set_seed(7))
    other = await generate(model, sampled.set_seed(8))
    assert first.text == again.text != other.text
    # top_p 0 keeps the one most likely token: the sampled answer is the greedy one
    greedy = await generate(model, ask().set_temperature(0))
    assert (await generate(model, sampled.set_top_p(0).set_seed(3))).text == greedy.text


async def test_local_required_tool_choice_makes_a_small_model_call_a_tool(
    tools_model: LocalModel,
) -> None:
    """Without worked examples the 135M model answers in text; forced, it calls."""
    request = (
        UnifiedRequest.new("smollm2")
        .add_tool("get_weather", "Current weather of a city.", WEATHER)
        .add_user_message("What is the weather in Tokyo?")
        .set_max_tokens(60)
        .set_temperature(0)
    )
    free = await generate(tools_model, request)
    assert free.tool_calls == ()
    done = await generate(tools_model, request.set_tool_choice("required"))
    assert [call.name for call in done.tool_calls] == ["get_weather"]
    assert isinstance(done.tool_calls[0].arguments["city"], str)
    assert (done.finish_reason, done.response.provider_finish_reason) == ("tool_calls", "stop")


async def test_local_named_tool_choice_calls_that_tool(tools_model: LocalModel) -> None:
    request = (
        UnifiedRequest.new("smollm2")
        .add_tool("get_weather", "Current weather of a city.", WEATHER)
        .add_tool("get_time", "Current time in a time zone.", TIME)
        .add_user_message("What is the weather in Tokyo?")
        .set_max_tokens(60)
        .set_temperature(0)
        .set_tool_choice(ToolChoice.tool("get_time"))
    )
    done = await generate(tools_model, request)
    assert len(done.tool_calls) == 1 and isinstance(done.tool_calls[0], ToolCall)
    assert done.tool_calls[0].name == "get_time"
    assert set(done.tool_calls[0].arguments) == {"zone"}
    assert done.finish_reason is FinishReason.TOOL_CALLS


async def test_local_tool_choice_none_leaves_the_tools_out_of_the_prompt(
    tools_model: LocalModel,
) -> None:
    request = (
        UnifiedRequest.new("smollm2")
        .add_tool("get_weather", "Current weather of a city.", WEATHER)
        .add_user_message("What is the weather in Tokyo?")
    )
    assert "get_weather" in tools_model.render(request)
    assert "get_weather" not in tools_model.render(request.set_tool_choice("none"))
    assert "get_weather" in tools_model.render(request.set_tool_choice("auto"))


async def test_local_forced_tool_is_refused_with_thinking_or_an_output_schema(
    tools_model: LocalModel,
) -> None:
    request = (
        UnifiedRequest.new("smollm2")
        .add_tool("get_weather", "Current weather of a city.", WEATHER)
        .add_user_message("Weather in Tokyo?")
        .set_tool_choice("required")
    )
    with pytest.raises(ConfigurationError, match="one of tool_choice and output_schema"):
        tools_model.prepare(request.set_output_schema(WEATHER))
    with pytest.raises(ConfigurationError, match="does not declare"):
        tools_model.prepare(request.set_tool_choice(ToolChoice.tool("get_time")))
    # a template whose generation prompt opens a reasoning block: generation starts there
    plain = TEMPLATE.read_text()
    thinking = plain.replace("assistant\n{% endif", "assistant\n<think>\n{% endif")
    assert thinking != plain
    with load_model("smollm2", n_ctx=1024, chat_template=thinking) as thinker:
        assert thinker.capabilities().tools and thinker.capabilities().reasoning
        with pytest.raises(ConfigurationError, match="no room for reasoning"):
            thinker.prepare(request)
        with pytest.raises(ConfigurationError, match="no room for reasoning"):
            thinker.prepare(request.set_thinking(True))
        assert thinker.prepare(request.set_tool_choice("auto")).grammar is None


async def test_local_a_cut_during_thinking_is_length() -> None:
    with load_model("smollm2", n_ctx=1024, chat_template=THINKING_CHATML) as thinker:
        done = await generate(thinker, ask("Why is the sky blue?", 5).set_thinking(True))
    assert done.text == "" and done.message.content  # all of it was reasoning
    assert (done.finish_reason, done.response.provider_finish_reason) == ("length", "length")
