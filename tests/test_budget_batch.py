"""A Budget's batch reservations, without a server: what `reserve_batch` holds, for
how long, what it refuses and how it says so, and what `settle_batch` charges and
warns (docs/batches.md, on budgets; the client's side is in test_batches.py)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from cuca import (
    Budget,
    BudgetExceeded,
    BudgetWarning,
    MemoryStore,
    ProviderEndpoint,
    UnifiedRequest,
)

OPENAI = ProviderEndpoint.OPENAI
NOW = 7300.0  # in the third 3,600 s window (window number 2)


def request(max_tokens: int, model: str = "gpt-4o") -> UnifiedRequest:
    return (
        UnifiedRequest.new(model)
        .add_user_message("Name a river.")
        .set_max_tokens(max_tokens)
        .with_provider(OPENAI)
    )


REQUESTS = [request(10), request(20), request(30)]


class TtlStore(MemoryStore):
    """A memory store that notes the ttl each update asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.ttls: list[float | None] = []

    async def update(self, key: str, change: Any, ttl: float | None = None) -> Any:
        self.ttls.append(ttl)
        return await super().update(key, change, ttl)


def clock(now: list[float]) -> Any:
    return lambda: now[0]


async def test_a_batch_reserves_each_request_at_the_batch_rate_in_the_window() -> None:
    now = [NOW]
    budget = Budget(usd=10, tokens=100_000, window=3600, clock=clock(now))
    projections = [budget.project(r) for r in REQUESTS]
    usd = sum((p.usd for p in projections if p.usd is not None), Decimal(0))
    tokens = sum(p.tokens for p in projections)
    reservation = await budget.reserve_batch(REQUESTS, Decimal("0.5"), 60.0)
    assert reservation == {
        "budget": "cuca:budget",
        "key": "cuca:budget:2",
        "ttl": 7200,  # the window's key lives two windows
        "id": reservation["id"],
        "amounts": {"usd": str(usd * Decimal("0.5")), "tokens": str(tokens)},
    }
    state = await budget.store.get("cuca:budget:2")
    assert state["held"][reservation["id"]] == {
        "at": NOW,
        "ttl": 60.0,  # held as long as the batch may run, not RESERVATION_TTL
        "usd": str(usd * Decimal("0.5")),
        "tokens": str(tokens),
    }


async def test_a_batch_reservation_is_dropped_after_its_own_ttl() -> None:
    now = [NOW]
    budget = Budget(tokens=100_000, clock=clock(now))
    tokens = sum(budget.project(r).tokens for r in REQUESTS)
    budget.tokens = tokens * 3 // 2  # room for one batch, not two
    await budget.reserve_batch(REQUESTS, Decimal(1), 60.0)
    now[0] += 59.0
    with pytest.raises(BudgetExceeded):
        await budget.reserve_batch(REQUESTS, Decimal(1), 60.0)
    now[0] += 2.0  # 61 s on: the first batch's hold is gone, long before an hour
    await budget.reserve_batch(REQUESTS, Decimal(1), 60.0)


async def test_a_batch_over_the_limit_is_refused_with_what_was_spent_and_projected() -> None:
    now = [NOW]
    budget = Budget(tokens=100_000, clock=clock(now))
    tokens = sum(budget.project(r).tokens for r in REQUESTS)
    first = await budget.reserve_batch(REQUESTS, Decimal(1), 60.0)
    await budget.settle_batch(first, Decimal(0), 1234)
    budget.tokens = 1234 + tokens - 1  # one token short
    with pytest.raises(BudgetExceeded) as refused:
        await budget.reserve_batch(REQUESTS, Decimal(1), 60.0)
    error = refused.value
    assert (error.unit, error.spent, error.projected, error.limit) == (
        "tokens",
        1234,
        tokens,
        1234 + tokens - 1,
    )
    assert str(error) == (
        f"budget exceeded: tokens: spent and reserved 1234 tokens, this batch projects "
        f"{tokens} tokens, the limit is {1234 + tokens - 1} tokens"
    )


async def test_a_batch_over_the_dollar_limit_is_refused_in_dollars() -> None:
    now = [NOW]
    budget = Budget(usd=1, clock=clock(now))
    usd = sum((budget.project(r).usd or Decimal(0) for r in REQUESTS), Decimal(0))
    first = await budget.reserve_batch(REQUESTS, Decimal(1), 60.0)
    await budget.settle_batch(first, Decimal("0.25"), 10)
    budget.usd = Decimal("0.25") + usd / 2  # the batch at full price does not fit
    with pytest.raises(BudgetExceeded) as refused:
        await budget.reserve_batch(REQUESTS, Decimal(1), 60.0)
    error = refused.value
    assert (error.unit, error.spent, error.projected, error.limit) == (
        "usd",
        Decimal("0.25"),
        usd,
        Decimal("0.25") + usd / 2,
    )
    assert str(error) == (
        f"budget exceeded: usd: spent and reserved $0.250000, this batch projects "
        f"${usd:.6f}, the limit is ${Decimal('0.25') + usd / 2:.6f}"
    )
    await budget.reserve_batch(REQUESTS, Decimal("0.5"), 60.0)  # at the batch rate, it fits


async def test_a_batch_holding_an_unpriced_model_is_refused_under_refuse() -> None:
    now = [NOW]
    budget = Budget(usd=1, clock=clock(now))  # on_unpriced="refuse", the default with usd
    first = await budget.reserve_batch(REQUESTS, Decimal(1), 60.0)
    await budget.settle_batch(first, Decimal("0.125"), 10)
    with pytest.raises(BudgetExceeded) as refused:
        await budget.reserve_batch([*REQUESTS, request(5, "no-such-model")], Decimal(1), 60.0)
    error = refused.value
    assert (error.unit, error.spent, error.projected, error.limit) == (
        "usd",
        Decimal("0.125"),
        None,
        Decimal(1),
    )
    assert str(error) == (
        "budget exceeded: no price is known for 'no-such-model' on openai "
        '(on_unpriced="refuse"; pass on_unpriced="allow" to count it at $0)'
    )


async def test_an_unpriced_model_in_a_batch_counts_nothing_when_allowed() -> None:
    now = [NOW]
    priced = Budget(usd=1, on_unpriced="allow", clock=clock(now))
    alone = await priced.reserve_batch(REQUESTS, Decimal(1), 60.0)
    both = await priced.reserve_batch([*REQUESTS, request(5, "no-such-model")], Decimal(1), 60.0)
    assert both["amounts"]["usd"] == alone["amounts"]["usd"]  # the unpriced one adds $0
    tokens_only = Budget(tokens=100_000, on_unpriced="refuse", clock=clock(now))
    held = await tokens_only.reserve_batch([request(5, "no-such-model")], Decimal(1), 60.0)
    assert held["amounts"] == {"tokens": str(tokens_only.project(request(5)).tokens)}


async def test_settling_a_batch_charges_its_exact_cost_and_tells_the_warnings() -> None:
    now = [NOW]
    told: list[BudgetWarning] = []
    store = TtlStore()
    budget = Budget(
        usd=1, tokens=1000, window=100, store=store, warn_at=0.5, on_warn=told.append,
        clock=clock(now),
    )  # fmt: skip
    reservation = await budget.reserve_batch([request(1)], Decimal(1), 60.0)
    warnings = await budget.settle_batch(reservation, 0.625, 700)
    assert warnings == [
        BudgetWarning("usd", Decimal("0.625"), Decimal(1), 0.625),
        BudgetWarning("tokens", 700, 1000, 0.7),
    ]
    assert told == warnings
    assert await budget.spent() == {"usd": Decimal("0.625"), "tokens": 700}
    state = await store.get(reservation["key"])
    assert state["held"] == {}  # released
    assert store.ttls == [200, 200]  # the window's key keeps two windows' life
    second = await budget.reserve_batch([request(1)], Decimal(1), 60.0)
    assert await budget.settle_batch(second, Decimal("0.125"), 100) == []  # told once
    assert await budget.spent() == {"usd": Decimal("0.75"), "tokens": 800}  # added up
