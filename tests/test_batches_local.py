"""The local engine's batch: the job's requests as concurrent turns of one model, with
the shape of a vendor's results."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
from support.models import load_model

from cuca import (
    BatchCancelled,
    Completion,
    ConfigurationError,
    CucaClient,
    LocalModel,
    ProviderEndpoint,
    SamplingConfig,
    UnifiedRequest,
)
from cuca.batches import BatchState


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    loaded = load_model("smollm2", n_ctx=1024, n_seq=2, sampling=SamplingConfig(seed=7))
    yield loaded
    loaded.close()


def ask(text: str) -> UnifiedRequest:
    return UnifiedRequest.new("smollm2").add_user_message(text).set_max_tokens(6)


async def test_batch_local_gives_what_each_turn_alone_gives(model: LocalModel) -> None:
    """Same answers as the turns run one by one (greedy: batching never changes bits),
    keyed and ordered as given."""
    requests = {"b": ask("Name a colour."), "a": ask("Name a fruit."), "c": ask("Say hi.")}
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        alone = {
            key: (await client.generate(r.set_temperature(0.0))).text for key, r in requests.items()
        }
        job = await client.batch({k: r.set_temperature(0.0) for k, r in requests.items()})
        status = await job.wait()
        results = await job.results()
    assert status.state is BatchState.COMPLETED and status.counts.succeeded == 3
    assert list(results) == ["b", "a", "c"]
    assert all(isinstance(done, Completion) for done in results.values())
    assert {key: done.text for key, done in results.items()} == alone  # type: ignore[union-attr]
    assert job.id.startswith("local:")


async def test_batch_local_cancel_cancels_what_had_not_run(model: LocalModel) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        job = await client.batch([ask("One."), ask("Two."), ask("Three."), ask("Four.")])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(job.wait)
            await trio.sleep(0)
            await job.cancel()
        results = await job.results()
    assert results.state is BatchState.CANCELLED
    assert len(results) == 4
    assert all(isinstance(o, Completion | BatchCancelled) for o in results.values())
    assert any(isinstance(o, BatchCancelled) for o in results.values())


async def test_batch_local_needs_the_process_that_submitted_it(model: LocalModel) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        with pytest.raises(ConfigurationError, match="no batch job"):
            await client.batch_job("local:0123")
