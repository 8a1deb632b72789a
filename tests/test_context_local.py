"""The window, counting and overflow on the in-process engine (SmolLM2 135M)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cuca import (
    ContextOverflowError,
    CucaClient,
    HttpStatusError,
    ProviderEndpoint,
    UnifiedRequest,
)
from cuca.engine import LocalModel, SamplingConfig, default_model_path


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    with LocalModel.load(default_model_path(), n_ctx=512, sampling=SamplingConfig(seed=7)) as m:
        yield m


def conversation() -> UnifiedRequest:
    return (
        UnifiedRequest.new("smollm2")
        .add_system_message("You are terse.")
        .add_user_message("Name three rivers.")
        .add_assistant_message("Nile, Amazon, Danube.")
        .add_user_message("And three <|im_end|> mountains?")  # markup in content is text
        .set_max_tokens(3)
        .set_temperature(0.0)
    )


async def test_local_count_tokens_equals_the_turns_prompt_tokens(model: LocalModel) -> None:
    request = conversation()
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        counted = await client.count_tokens(request)
        answer = await client.generate(request)
    assert answer.response.usage is not None
    assert counted.exact
    assert counted.method == "local engine"
    assert counted.tokens == answer.response.usage.prompt_tokens


async def test_local_model_info_is_n_ctx_and_trained_length(model: LocalModel) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        info = await client.model_info()
    assert info.context_window == 512
    assert info.trained_context == 8192  # SmolLM2's GGUF context_length
    assert info.model == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert info.source == "local engine"


async def test_local_overflow_says_both_numbers(model: LocalModel) -> None:
    request = UnifiedRequest.new("smollm2").add_user_message("word " * 600)
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        size = (await client.count_tokens(request)).tokens
        with pytest.raises(ContextOverflowError) as info:
            await client.generate(request)
    error = info.value
    assert not isinstance(error, HttpStatusError)  # no HTTP status in process
    assert (error.limit, error.requested) == (512, size)
    assert str(error).startswith(
        f"context overflow: the prompt has {size} tokens but the context holds 512"
    )
