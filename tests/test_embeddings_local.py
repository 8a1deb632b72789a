"""The local engine's embedding mode on a real GGUF: the vectors llama-cpp-python's
``Llama.embed`` gives for the same model, texts and pooling, bit for bit."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from support.models import THREADS, load_model, model_path

from cuca import ConfigurationError, ContextOverflowError, CucaClient, LocalModel, ProviderEndpoint

TEXTS = [
    "The cat sat on the mat.",
    "Trio is a library for structured concurrency.",
    "¿Dónde está la biblioteca?",
    "a",
    "Embeddings turn text into vectors of numbers " * 3,
]
POOLING_IDS = {"mean": 1, "cls": 2, "last": 3}
pytestmark = pytest.mark.slow  # each reference loads the model again in llama-cpp-python


@pytest.fixture(scope="module")
def smollm2() -> Iterator[LocalModel]:
    with load_model("smollm2") as model:
        yield model


def reference(pooling: str, texts: list[str], n_batch: int = 512) -> tuple[list[Any], int]:
    """llama-cpp-python's own vectors and token count for ``texts``."""
    import llama_cpp

    llama = llama_cpp.Llama(
        str(model_path("smollm2")),
        embedding=True,
        pooling_type=POOLING_IDS[pooling],
        n_ctx=n_batch,
        n_batch=n_batch,
        verbose=False,
        **THREADS,
    )
    try:
        vectors, count = llama.embed(texts, return_count=True)
    finally:
        llama.close()
    return vectors, count


def bits(vector: Any) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
async def test_local_embed_equals_llama_cpp_python_bit_for_bit(
    smollm2: LocalModel, pooling: Any
) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=smollm2) as client:
        result = await client.embed(TEXTS, pooling=pooling)
    expected, count = await trio.to_thread.run_sync(reference, pooling, TEXTS)
    assert [bits(v) for v in result.vectors] == [bits(v) for v in expected]
    assert result.usage is not None and result.usage.prompt_tokens == count
    assert result.dimensions == 576 and len(result) == len(TEXTS)
    assert result.model == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert result.cost is None  # nothing is priced on the local engine


async def test_local_embed_packs_steps_as_llama_cpp_python_does(smollm2: LocalModel) -> None:
    """Sixty texts over several steps of a small batch: still the reference's bits."""
    texts = [f"sentence number {i} about {'many ' * (i % 7)}things" for i in range(60)]
    with load_model("smollm2", embedding_batch=64) as small:
        async with CucaClient(ProviderEndpoint.LOCAL, local_model=small) as client:
            result = await client.embed(texts, pooling="mean")
    expected, _ = await trio.to_thread.run_sync(reference, "mean", texts, 64)
    assert [bits(v) for v in result.vectors] == [bits(v) for v in expected]


async def test_local_embed_one_text_gives_one_vector(smollm2: LocalModel) -> None:
    """One string is one input; its vector is llama-cpp-python's for it alone (a text's
    last bits depend on the texts that share its step, there as here)."""
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=smollm2) as client:
        one = await client.embed(TEXTS[0], pooling="mean")
    expected, _ = await trio.to_thread.run_sync(reference, "mean", TEXTS[:1])
    assert len(one) == 1 and bits(one[0]) == bits(expected[0])


async def test_local_embed_without_pooling_on_a_model_that_declares_none_is_refused(
    smollm2: LocalModel,
) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=smollm2) as client:
        with pytest.raises(ConfigurationError, match=r'declares no pooling.*pooling="mean"'):
            await client.embed(TEXTS)


async def test_local_embed_text_longer_than_the_step_is_a_context_overflow(
    smollm2: LocalModel,
) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=smollm2) as client:
        with pytest.raises(ContextOverflowError, match=r"input 1 has \d+ tokens; .* at most 512"):
            await client.embed(["short", "word " * 600], pooling="mean")


async def test_local_embed_pooling_name_is_checked(smollm2: LocalModel) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=smollm2) as client:
        with pytest.raises(ConfigurationError, match="pooling must be one of mean, last, cls"):
            await client.embed(TEXTS, pooling="max")  # type: ignore[arg-type]


async def test_local_embed_and_a_turn_share_the_model(smollm2: LocalModel) -> None:
    """An embedding and a chat turn at once on one loaded model: both complete, and the
    vectors are the ones embedding alone gives."""
    from cuca import UnifiedRequest

    request = UnifiedRequest.new("local").add_user_message("Hi").set_max_tokens(8)
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=smollm2) as client:
        alone = await client.embed(TEXTS, pooling="mean")
        results: dict[str, Any] = {}

        async def turn() -> None:
            results["turn"] = await client.generate(request)

        async def vectors() -> None:
            results["embed"] = await client.embed(TEXTS, pooling="mean")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(turn)
            nursery.start_soon(vectors)
    assert results["turn"].response.usage.completion_tokens > 0
    assert [bits(v) for v in results["embed"]] == [bits(v) for v in alone]
