"""Batches: many requests as one vendor job, run by loopback servers that follow each
vendor's documented states on trio's mock clock (a day in milliseconds)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from support.batch_servers import (
    AnthropicBatchServer,
    BatchServer,
    GeminiBatchServer,
    OpenAiBatchServer,
    Plan,
    serving,
)

from cuca import (
    BatchCancelled,
    BatchExpired,
    BatchFailed,
    Budget,
    BudgetExceeded,
    Completion,
    ConfigurationError,
    CucaClient,
    HttpStatusError,
    ProviderEndpoint,
    SqliteStore,
    UnifiedRequest,
    UnifiedResponse,
)
from cuca.batches import BatchPolling, BatchState

QUICK = BatchPolling(first=30.0, factor=2.0, most=1_800.0)
"""Polls far apart enough that a day-long job takes a few hundred of them."""

VENDORS: dict[str, tuple[type[BatchServer], ProviderEndpoint, str, str]] = {
    "openai": (OpenAiBatchServer, ProviderEndpoint.OPENAI, "/v1", "gpt-4o-mini"),
    "anthropic": (AnthropicBatchServer, ProviderEndpoint.ANTHROPIC, "/v1", "claude-haiku-4-5"),
    "gemini": (GeminiBatchServer, ProviderEndpoint.GOOGLE_GEMINI, "", "gemini-2.5-flash"),
}


def ask(model: str, text: str) -> UnifiedRequest:
    return UnifiedRequest.new(model).add_user_message(text).set_max_tokens(64)


@asynccontextmanager
async def vendor(
    name: str, plan: Plan | None = None, **options: Any
) -> AsyncIterator[tuple[BatchServer, CucaClient, str]]:
    """A vendor's batch server, and a client of it; the model its requests name."""
    cls, endpoint, prefix, model = VENDORS[name]
    server = cls(plan)
    async with serving(server) as replay:
        url = replay.url + prefix
        async with CucaClient(endpoint, base_url=url, api_key="k", **options) as client:
            yield server, client, model


async def states_seen(job: Any, every: float = 55.0) -> list[BatchState]:
    """Each state the job went through, polled every ``every`` seconds to its end."""
    seen: list[BatchState] = []
    while True:
        state = (await job.status()).state
        if not seen or seen[-1] is not state:
            seen.append(state)
        if state.ended:
            return seen
        await trio.sleep(every)


# -- the states of each vendor's job -------------------------------------------------------


@pytest.mark.parametrize("name", list(VENDORS))
async def test_batch_answers_every_request_by_the_users_ids_in_order(
    name: str, autojump_clock: Any
) -> None:
    async with vendor(name) as (server, client, model):
        requests = {"zeta": ask(model, "one"), "alpha": ask(model, "two"), "mid": ask(model, "3")}
        job = await client.batch(requests, polling=QUICK)
        results = await job.results()
    assert list(results) == ["zeta", "alpha", "mid"]  # the user's order, not the vendor's
    assert all(isinstance(done, Completion) for done in results.values())
    assert [results[k].text for k in results] == ["echo: one", "echo: two", "echo: 3"]  # type: ignore[union-attr]
    assert results.state is BatchState.COMPLETED
    assert results.usage.prompt_tokens == 30 and results.usage.completion_tokens == 15
    assert job.id.endswith(server.jobs[job.vendor_id].id)


async def test_batch_openai_goes_through_its_documented_states(autojump_clock: Any) -> None:
    async with vendor("openai") as (_, client, model):
        job = await client.batch([ask(model, "hi")])
        seen = await states_seen(job)
    assert seen == [
        BatchState.VALIDATING,
        BatchState.IN_PROGRESS,
        BatchState.FINALIZING,
        BatchState.COMPLETED,
    ]


async def test_batch_anthropic_reads_ended_as_completed(autojump_clock: Any) -> None:
    async with vendor("anthropic") as (_, client, model):
        job = await client.batch([ask(model, "hi")])
        seen = await states_seen(job)
        status = await job.status()
    assert seen == [BatchState.IN_PROGRESS, BatchState.COMPLETED]
    assert status.vendor_state == "ended"
    assert status.counts.succeeded == 1


async def test_batch_gemini_goes_pending_running_succeeded(autojump_clock: Any) -> None:
    async with vendor("gemini") as (_, client, model):
        job = await client.batch([ask(model, "hi")])
        seen = await states_seen(job)
        status = await job.status()
    assert seen == [BatchState.VALIDATING, BatchState.IN_PROGRESS, BatchState.COMPLETED]
    assert status.vendor_state == "BATCH_STATE_SUCCEEDED"
    assert status.counts.total == 1 and status.counts.succeeded == 1


# -- partial outcomes ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(VENDORS))
async def test_batch_expired_job_gives_each_request_its_own_end(
    name: str, autojump_clock: Any
) -> None:
    """A day passes: the first two requests ran (one answered, one refused with a
    400), the third expired. Nothing is missing."""
    plan = Plan(expire=True, ran=2, errors={"b": (400, "max_tokens is too large")})
    async with vendor(name, plan) as (_, client, model):
        job = await client.batch(
            {"a": ask(model, "x"), "b": ask(model, "y"), "c": ask(model, "z")}, polling=QUICK
        )
        start = trio.current_time()
        status = await job.wait()
        results = await job.results()
    assert status.state is BatchState.EXPIRED
    assert trio.current_time() - start >= 86_400
    assert isinstance(results["a"], Completion) and results["a"].text == "echo: x"
    refused = results["b"]
    assert isinstance(refused, HttpStatusError) and refused.status == 400
    assert "max_tokens is too large" in str(refused)
    assert isinstance(results["c"], BatchExpired)
    assert list(results.errors) == ["b", "c"] and list(results.completions) == ["a"]


@pytest.mark.parametrize("name", list(VENDORS))
async def test_batch_cancelled_job_cancels_what_had_not_run(name: str, autojump_clock: Any) -> None:
    plan = Plan(ran=1)
    async with vendor(name, plan) as (_, client, model):
        job = await client.batch([ask(model, "x"), ask(model, "y")], polling=QUICK)
        await trio.sleep(120)  # running
        asked = await job.cancel()
        status = await job.wait()
        results = await job.results()
    if name != "gemini":  # Gemini has no "cancelling" state
        assert asked.state is BatchState.CANCELLING
    assert status.state is BatchState.CANCELLED
    assert isinstance(results["0"], Completion)
    assert isinstance(results["1"], BatchCancelled)


async def test_batch_failed_job_fails_every_request_with_its_reason(
    autojump_clock: Any,
) -> None:
    async with vendor("openai", Plan(fail="line 1: model is required")) as (_, client, model):
        job = await client.batch([ask(model, "x"), ask(model, "y")])
        status = await job.wait()
        results = await job.results()
    assert status.state is BatchState.FAILED
    assert status.error == "line 1: model is required"
    for outcome in results.values():
        assert isinstance(outcome, BatchFailed)
        assert "line 1: model is required" in str(outcome)


# -- restart, cancel, cost ------------------------------------------------------------------


async def test_batch_job_reattaches_after_a_restart(tmp_path: Path, autojump_clock: Any) -> None:
    """A process submits and ends; another finds the job by its id in the shared store
    and reads the results, keyed and ordered as given."""
    cls, endpoint, _, model = VENDORS["anthropic"]
    server = cls()
    async with serving(server) as replay:
        url = replay.url + "/v1"
        store = SqliteStore(tmp_path / "jobs.db")
        async with CucaClient(endpoint, base_url=url, api_key="k") as first:
            job = await first.batch({"q-2": ask(model, "b"), "q-1": ask(model, "a")}, store=store)
            job_id = job.id
        await store.aclose()
        del job

        store = SqliteStore(tmp_path / "jobs.db")
        async with CucaClient(endpoint, base_url=url, api_key="k") as second:
            again = await second.batch_job(job_id, store=store, polling=QUICK)
            results = await again.results()
        await store.aclose()
    assert again.ids == ("q-2", "q-1")
    assert [(k, v.text) for k, v in results.items()] == [("q-2", "echo: b"), ("q-1", "echo: a")]  # type: ignore[union-attr]


async def test_batch_job_unknown_id_names_the_store(autojump_clock: Any) -> None:
    async with vendor("openai") as (_, client, _model):
        with pytest.raises(ConfigurationError, match="no batch job 'openai:batch_9'"):
            await client.batch_job("openai:batch_9")


async def test_batch_wait_cancelled_leaves_no_task(autojump_clock: Any) -> None:
    async with vendor("openai") as (server, client, model):
        job = await client.batch([ask(model, "x")])
        with trio.move_on_after(200) as scope:
            await job.wait()
        me = trio.lowlevel.current_task()
        tasks = [t.name for n in me.child_nurseries for t in n.child_tasks]
        tasks = [name for name in tasks if not name.startswith("cuca.testing")]
        polls = server.polls
        await trio.sleep(3_600)  # nothing polls in the background
        assert server.polls == polls
    assert scope.cancelled_caught
    assert tasks == []


async def test_batch_answer_costs_the_batch_rate(autojump_clock: Any) -> None:
    async with vendor("openai") as (_, client, model):
        job = await client.batch([ask(model, "x"), ask(model, "y")], polling=QUICK)
        results = await job.results()
    done = results["0"]
    assert isinstance(done, Completion) and done.response.batch
    listed = UnifiedResponse(done.response.provider, model, done.usage).cost
    assert listed is not None and done.response.cost == listed / 2
    assert results.cost == listed  # two requests at half the price


async def test_batch_budget_reserves_at_submit_and_charges_at_results(
    autojump_clock: Any,
) -> None:
    budget = Budget(usd=1.0)
    async with vendor("openai", plugins=[budget]) as (_, client, model):
        job = await client.batch([ask(model, "x"), ask(model, "y")], polling=QUICK)
        state = await budget.store.get(budget.key)
        (held,) = state["held"].values()
        assert Decimal(held["usd"]) > 0 and held["ttl"] > 86_400  # held for the whole job
        assert await budget.spent() == {"usd": 0.0}
        results = await job.results()
        await job.results()  # read twice, charged once
    spent = (await budget.spent())["usd"]
    assert results.cost is not None and spent == results.cost  # exact, Decimal to Decimal
    assert (await budget.store.get(budget.key))["held"] == {}


async def test_batch_budget_reserves_at_the_exact_batch_rate(autojump_clock: Any) -> None:
    """The reservation a submit holds is each request's projection at the vendor's batch
    rate in Decimal, to the last digit (issue 35 §4: money is never a float), for a
    rate of any digits."""
    from cuca.cost import batch_rate

    rate = batch_rate(ProviderEndpoint.OPENAI)
    assert type(rate) is Decimal and rate == Decimal("0.5")
    budget = Budget(usd=1.0)
    async with vendor("openai", plugins=[budget]) as (_, client, model):
        requests = [ask(model, "x"), ask(model, "y" * 40)]
        await client.batch(requests, polling=QUICK)
        requests = [attrs.evolve(r, provider=ProviderEndpoint.OPENAI) for r in requests]
        (held,) = (await budget.store.get(budget.key))["held"].values()
        odd = await budget.reserve_batch(requests, Decimal("0.1"), 60.0)
    projected = [budget.project(request).usd for request in requests]
    assert all(usd is not None for usd in projected)
    listed = sum((usd for usd in projected if usd is not None), Decimal(0))
    assert Decimal(held["usd"]) == listed * rate
    assert Decimal(odd["amounts"]["usd"]) == listed * Decimal("0.1")  # no float's 0.1000...05


async def test_batch_budget_refuses_before_anything_is_sent(autojump_clock: Any) -> None:
    budget = Budget(usd=0.000001)
    async with vendor("openai", plugins=[budget]) as (server, client, model):
        with pytest.raises(BudgetExceeded, match="this batch projects"):
            await client.batch([ask(model, "x")])
    assert server.jobs == {}
    assert (await budget.store.get(budget.key))["held"] == {}


# -- what a batch refuses -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "limit", "value", "message"),
    [
        ("openai", "chat.batch.MAX_REQUESTS", 2, "OpenAI runs at most 2 requests in one batch; "
         "this one has 3: submit it as 2 batches"),
        ("openai", "chat.batch.MAX_BYTES", 500, "OpenAI takes a batch's input of at most 0 MB"),
        ("anthropic", "anthropic.batch.MAX_REQUESTS", 2, "Anthropic runs at most 2 requests"),
        ("anthropic", "anthropic.batch.MAX_BYTES", 500, "Anthropic takes a batch's input"),
        ("gemini", "gemini.batch.MAX_INLINE_BYTES", 500, "Gemini takes a batch's input"),
    ],
)
async def test_batch_over_the_vendors_limits_is_refused_before_any_request(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch, name: str, limit: str, value: int,
    message: str,
) -> None:
    """A batch over the vendor's documented limit on requests or bytes (made small here:
    the real ones are 50,000 requests and 200 MB...) is a ConfigurationError saying so,
    before any request: no file, no job, the budget's reservation given back."""
    monkeypatch.setattr(f"cuca.providers.{limit}", value)
    budget = Budget(usd=10.0)
    async with vendor(name, plugins=[budget]) as (server, client, model):
        requests = [ask(model, f"question {i}: " + "words " * 20) for i in range(3)]
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            await client.batch(requests)
    assert server.jobs == {} and getattr(server, "files", {}) == {}
    assert (await budget.store.get(budget.key))["held"] == {}


async def test_batch_refuses_an_empty_batch_and_a_wrong_item(autojump_clock: Any) -> None:
    async with vendor("openai") as (server, client, _model):
        with pytest.raises(ConfigurationError, match="at least one request"):
            await client.batch([])
        with pytest.raises(ConfigurationError, match="not a UnifiedRequest"):
            await client.batch({"a": "hello"})  # type: ignore[dict-item]
    assert server.jobs == {}


async def test_batch_refuses_a_server_without_batches() -> None:
    async with CucaClient(ProviderEndpoint.VLLM, base_url="http://127.0.0.1:9") as client:
        with pytest.raises(ConfigurationError, match="vllm has no batch API"):
            await client.batch([ask("m", "x")])


async def test_batch_gemini_refuses_two_models(autojump_clock: Any) -> None:
    async with vendor("gemini") as (server, client, model):
        with pytest.raises(ConfigurationError, match="one model"):
            await client.batch([ask(model, "x"), ask("gemini-2.5-pro", "y")])
    assert server.jobs == {}


async def test_batch_line_body_is_the_turns_own_encoding() -> None:
    """No second encoder: a batch line's body is what ``encode`` builds for the same
    request sent alone (without streaming)."""
    async with CucaClient(ProviderEndpoint.OPENAI, api_key="k") as client:
        adapter: Any = client.adapter()
        request = ask("gpt-4o-mini", "hello").set_temperature(0.3)
        line = adapter.batch_wire().line("a", request)
        alone = adapter.encode(request.set_stream(False)).body
    assert line["body"] == {k: v for k, v in alone.items() if k != "stream"}
    assert line["url"] == "/v1/chat/completions"


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        (ProviderEndpoint.OPENAI, "gpt-4o-mini"),  # genai-prices lists its batch prices
        (ProviderEndpoint.ANTHROPIC, "claude-3-haiku"),  # it does not: half the list price
    ],
)
def test_batch_cost_is_half_the_list_price(provider: ProviderEndpoint, model: str) -> None:
    from cuca.cost import turn_cost
    from cuca.types import TokenUsage

    usage = TokenUsage(1_000, 1_000)
    listed = turn_cost(provider, model, usage)
    assert listed is not None and listed > 0
    assert turn_cost(provider, model, usage, batch=True) == listed / 2


def test_batch_polling_backs_off_to_its_most() -> None:
    delays = BatchPolling(first=5.0, factor=2.0, most=30.0).delays()
    assert [next(delays) for _ in range(5)] == [5.0, 10.0, 20.0, 30.0, 30.0]
    with pytest.raises(ConfigurationError):
        BatchPolling(factor=0.5)
