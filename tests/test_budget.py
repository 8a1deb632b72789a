"""Budget over loopback: reservations keep concurrent turns under the limit, exact costs
are charged, unpriced models are refused or allowed, warn_at fires once."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from support.transcripts import transcript

from cuca import (
    Budget,
    BudgetExceeded,
    BudgetWarning,
    CucaClient,
    HttpStatusError,
    ProviderEndpoint,
    RetryPolicy,
    UnifiedRequest,
)
from cuca.testing import Reply, open_replay_server

OPENAI = ProviderEndpoint.OPENAI
REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64)
TEXT = Reply(transcript("openai/text"))  # 1117 prompt (1024 cached), 46 completion tokens
SLOW = Reply(transcript("openai/text"), chunks=(64,) * 20, delay=0.02)


def client(url: str, budget: Budget, **options: Any) -> CucaClient:
    return CucaClient(OPENAI, base_url=f"{url}/v1", api_key="k", plugins=[budget], **options)


async def test_budget_twenty_concurrent_turns_admit_only_what_fits() -> None:
    outcomes: list[str] = []
    budget = Budget(usd=1)
    async with open_replay_server(SLOW) as server, client(server.url, budget) as c:
        prompt = (await c.count_tokens(REQUEST)).tokens
        projection = budget.project(REQUEST.with_provider(OPENAI), prompt)
        assert projection.usd is not None
        budget.usd = projection.usd * 5.5  # room for 5 reservations

        async def turn() -> None:
            try:
                await c.generate(REQUEST)
                outcomes.append("ok")
            except BudgetExceeded:
                outcomes.append("refused")

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(turn)
    assert outcomes.count("ok") == 5, outcomes
    assert outcomes.count("refused") == 15
    assert len(server.requests) == 5
    spent = (await budget.spent())["usd"]
    assert spent > 0  # the exact costs of the 5 turns, charged at their end


async def test_budget_exceeded_says_spent_projected_and_limit() -> None:
    budget = Budget(usd=0.002)
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)  # spends ~$0.0011 of $0.002
        with pytest.raises(BudgetExceeded) as caught:
            await c.generate(REQUEST)
    error = caught.value
    assert error.unit == "usd" and error.limit == 0.002
    assert error.projected is not None and error.spent + error.projected > error.limit
    assert "spent and reserved $" in str(error) and "the limit is $0.002000" in str(error)
    assert len(server.requests) == 1


async def test_budget_refuses_unpriced_models_unless_allowed() -> None:
    request = UnifiedRequest.new("my-own-model").add_user_message("Hi").set_max_tokens(8)
    async with open_replay_server(TEXT) as server:
        async with client(server.url, Budget(usd=1.0)) as c:
            with pytest.raises(BudgetExceeded, match="no price is known for 'my-own-model'"):
                await c.generate(request)
        async with client(server.url, Budget(usd=1.0, on_unpriced="allow")) as c:
            await c.generate(request)
    assert len(server.requests) == 1


async def test_budget_tokens_counts_exact_usage_and_warns_once() -> None:
    warnings: list[BudgetWarning] = []
    budget = Budget(tokens=2380, warn_at=0.5, on_warn=warnings.append)
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)
        assert (await budget.spent())["tokens"] == 1117 + 46
        await c.generate(REQUEST)
        with pytest.raises(BudgetExceeded, match="tokens"):
            await c.generate(REQUEST)
    assert len(warnings) == 1
    assert warnings[0].unit == "tokens" and warnings[0].spent == 2 * 1163


async def test_budget_failed_turn_costs_nothing_cancelled_turn_its_reservation() -> None:
    failing = Reply(b'{"error": {"message": "bad"}}', status=400)
    budget = Budget(tokens=100_000)
    async with open_replay_server([failing, SLOW]) as server:
        async with client(server.url, budget, retry=RetryPolicy.never()) as c:
            with pytest.raises(HttpStatusError):
                await c.generate(REQUEST)
            assert (await budget.spent())["tokens"] == 0
            async with c.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break
            prompt = (await c.count_tokens(REQUEST)).tokens
    projected = budget.project(REQUEST, prompt).tokens
    assert (await budget.spent())["tokens"] == projected


async def test_budget_window_starts_again() -> None:
    now = [1000.0]
    budget = Budget(tokens=1200, window=60, clock=lambda: now[0])
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)
        with pytest.raises(BudgetExceeded):
            await c.generate(REQUEST)
        now[0] += 60
        await c.generate(REQUEST)
    assert len(server.requests) == 2


def test_budget_refuses_bad_settings() -> None:
    from cuca import ConfigurationError

    with pytest.raises(ConfigurationError, match="usd= or tokens="):
        Budget()
    with pytest.raises(ConfigurationError, match="on_unpriced"):
        Budget(usd=1, on_unpriced="maybe")  # type: ignore[arg-type]


async def test_budget_count_tokens_false_uses_the_text_estimate() -> None:
    from cuca.admission import estimate_tokens

    budget = Budget(tokens=10**6, count_tokens=False)
    counted: list[int] = []

    async def count(request: UnifiedRequest) -> int:
        counted.append(1)
        return 999

    reservation = await budget.admit(REQUEST, count)
    assert counted == []
    assert reservation.amounts["tokens"] == estimate_tokens(REQUEST) + 64
