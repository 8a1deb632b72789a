"""The window, counting and overflow on the in-process engine (SmolLM2 135M)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cuca import (
    Compactor,
    ContextOverflowError,
    CucaClient,
    HttpStatusError,
    MessageRole,
    ProviderEndpoint,
    UnifiedRequest,
)
from cuca.context import SummariseOldestTurns
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


def ask(history: UnifiedRequest, turn: int) -> UnifiedRequest:
    question = f"Question {turn}: name one thing that is {turn} meters long, and say why. " * 2
    return history.add_user_message(question).set_max_tokens(24).set_temperature(0.0)


async def test_local_forty_turns_overflow_without_a_compactor(model: LocalModel) -> None:
    history = UnifiedRequest.new("smollm2").add_system_message("You answer in one line.")
    answered = 0
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        with pytest.raises(ContextOverflowError) as info:
            for turn in range(40):
                request = ask(history, turn)
                done = await client.generate(request)
                history = request.add_assistant_message(done.text)
                answered += 1
    assert 3 < answered < 40  # the conversation outgrew n_ctx=512 on the way
    assert info.value.limit == 512 and info.value.requested is not None
    assert info.value.requested > 512


async def test_local_forty_turns_all_answered_with_a_compactor(model: LocalModel) -> None:
    budget = 400  # 512 less room for the answer's 24 tokens, and some to spare
    history = UnifiedRequest.new("smollm2").add_system_message("You answer in one line.")
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as counter:
        compactor = Compactor(counter, budget=budget, headroom=0.4)
        async with CucaClient(
            ProviderEndpoint.LOCAL, local_model=model, plugins=[compactor]
        ) as client:
            prompts, compacted = [], 0
            for turn in range(40):
                request = ask(history, turn)
                done = await client.generate(request)
                assert done.response.usage is not None
                prompts.append(done.response.usage.prompt_tokens)
                compacted += done.response.compaction is not None
                history = request.add_assistant_message(done.text)
    assert len(prompts) == 40
    assert max(prompts) <= budget
    assert compacted > 20  # most late turns were shortened
    report = done.response.compaction
    assert report is not None and report.exact
    assert report.tokens_after == prompts[-1]  # the count is the engine's own
    assert [s.strategy for s in report.steps] == ["drop_oldest_turns"]


async def test_local_summary_written_by_the_local_engine_and_reused(model: LocalModel) -> None:
    history = UnifiedRequest.new("smollm2").add_system_message("You answer in one line.")
    for n in range(12):
        history = history.add_user_message(f"Remember: river {n} is {100 + n} km long.")
        history = history.add_assistant_message(f"Noted: river {n}, {100 + n} km.")
    request = history.add_user_message("Which river is the longest?").set_max_tokens(8)
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as local:
        summary = SummariseOldestTurns(local, "smollm2", keep_turns=2, max_tokens=32)
        compactor = Compactor(local, budget=200, strategies=[summary])
        first = await compactor.on_request(request)
        again = await compactor.on_request(request)
        done = await local.generate(first)
    assert first.compaction is not None
    assert first.compaction.tokens_after <= 200 < first.compaction.tokens_before
    assert first.messages[1].role is MessageRole.SYSTEM
    assert first.messages[1].text().startswith("Summary of the earlier conversation: ")
    assert len(first.messages[1].text()) > len("Summary of the earlier conversation: ")
    assert again.messages == first.messages and summary.written == 1  # reused, not rewritten
    assert done.response.usage is not None
    assert done.response.usage.prompt_tokens == first.compaction.tokens_after
