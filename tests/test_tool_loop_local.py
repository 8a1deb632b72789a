"""The tool loop on the local engine: SmolLM2 135M with a ChatML template that has
Hermes-style tools (``tests/templates/chatml_tools.jinja``).

A 135M model calls a tool reliably only when the conversation shows it how: five
earlier rounds of question, call, result and answer come first (greedy decoding, a
fixed seed). The model then calls ``get_weather`` for Tokyo, the loop runs it, renders
the result back through the template and the model answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuca import (
    CucaClient,
    MessageRole,
    ProviderEndpoint,
    Step,
    Text,
    ToolCall,
    ToolResult,
    UnifiedRequest,
)
from cuca.engine import LocalModel, SamplingConfig, default_model_path

TEMPLATE = Path(__file__).resolve().parent / "templates" / "chatml_tools.jinja"
CITIES = ["Paris", "Rome", "Oslo", "Lima", "Cairo"]  # the five worked examples
SEED = 1234


def get_weather(city: str) -> str:
    """Current weather of a city.

    Args:
        city: the city's name
    """
    return f"{city}: 18C, rain"


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    template = TEMPLATE.read_text()
    sampling = SamplingConfig(seed=SEED)
    with LocalModel.load(default_model_path(), n_ctx=2048, sampling=sampling,
                         chat_template=template) as loaded:  # fmt: skip
        yield loaded


def shown_how() -> UnifiedRequest:
    """Five rounds of question, call, result and answer, then the real question."""
    request = UnifiedRequest.new("smollm2").set_temperature(0.0).set_max_tokens(40)
    for city in CITIES:
        call = ToolCall(f"call_{city.lower()}", "get_weather", {"city": city})
        request = request.add_user_message(f"Weather in {city}?").add_assistant_message(call)
        request = request.add_tool_result(call.id, get_weather(city), name="get_weather")
        request = request.add_assistant_message(f"In {city} it is 18C with rain.")
    return request.add_user_message("Weather in Tokyo?")


async def test_tool_loop_local_engine_calls_runs_and_answers(model: LocalModel) -> None:
    assert model.capabilities().tools
    request = shown_how()
    items: list[Any] = []
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        async with client.run_tools(request, [get_weather], max_steps=3) as stream:
            async for item in stream:
                items.append(item)
    calls = [item for item in items if isinstance(item, ToolCall)]
    assert [(c.name, dict(c.arguments)) for c in calls] == [("get_weather", {"city": "Tokyo"})]
    (result,) = [item for item in items if isinstance(item, ToolResult)]
    assert result == ToolResult(calls[0].id, "Tokyo: 18C, rain")
    assert items.count(Step(2)) == 1 and stream.complete
    answer = "".join(i.text for i in items[items.index(Step(2)) :] if isinstance(i, Text))
    assert answer.strip()
    # the conversation: the call, its result and the answer appended to the request
    added = stream.conversation.messages[len(request.messages) :]
    roles = [m.role for m in added]
    assert roles == [MessageRole.ASSISTANT, MessageRole.TOOL, MessageRole.ASSISTANT]
    assert added[1].content == (result,)
    # the next step's prompt holds the call and the result, as the template renders them
    prompt = model.render(stream.conversation)
    assert '{"name": "get_weather", "arguments": {"city": "Tokyo"}}' in prompt
    assert "<tool_response>\nTokyo: 18C, rain\n</tool_response>" in prompt
    usage, first, second = stream.usage, *stream.responses
    assert usage is not None and first.usage is not None and second.usage is not None
    assert usage.prompt_tokens == first.usage.prompt_tokens + second.usage.prompt_tokens
    completion = first.usage.completion_tokens + second.usage.completion_tokens
    assert usage.completion_tokens == completion
