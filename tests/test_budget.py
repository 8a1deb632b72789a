"""Budget over loopback: reservations keep concurrent turns under the limit, exact costs
are charged, unpriced models are refused or allowed, warn_at is told once to the
crossing turn's observers (the session log, the trace)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trio
from support.transcripts import transcript

from cuca import (
    Budget,
    BudgetExceeded,
    BudgetWarning,
    CucaClient,
    CucaPlugin,
    HttpStatusError,
    ProviderEndpoint,
    RetryPolicy,
    SqliteStore,
    TurnObserver,
    TurnOutcome,
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
        budget.usd = projection.usd * Decimal("5.5")  # room for 5 reservations

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
    assert error.unit == "usd" and error.limit == Decimal("0.002")
    assert isinstance(error.spent, Decimal) and isinstance(error.projected, Decimal)
    assert error.projected is not None and error.spent + error.projected > error.limit
    assert "spent and reserved $" in str(error) and "the limit is $0.002000" in str(error)
    assert len(server.requests) == 1


async def test_budget_charges_each_turns_exact_cost() -> None:
    budget = Budget(usd=1.0)
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        first = (await c.generate(REQUEST)).response
        second = (await c.generate(REQUEST.add_user_message("again"))).response
    assert first.cost is not None and second.cost is not None
    spent = (await budget.spent())["usd"]
    assert spent == first.cost + second.cost  # Decimal dollars summed exactly, as cost is
    assert isinstance(spent, Decimal) and "e" not in str(spent)


async def test_budget_money_is_decimal_in_spent_the_warning_and_the_store(tmp_path: Path) -> None:
    """Dollars are Decimal wherever a user reads them (spent(), BudgetWarning), kept as
    decimal strings in a shared store, and JSON-ready warnings write them as strings."""
    told: list[BudgetWarning] = []
    store = SqliteStore(tmp_path / "budget.db")
    budget = Budget(usd=0.002, warn_at=0.5, on_warn=told.append, store=store)
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        cost = (await c.generate(REQUEST)).response.cost
    assert cost is not None
    stored = await store.get("cuca:budget")
    await store.aclose()
    assert stored["spent"]["usd"] == str(cost)
    assert [(w.unit, w.spent, w.limit) for w in told] == [("usd", cost, Decimal("0.002"))]
    assert isinstance(told[0].spent, Decimal)
    assert told[0].to_dict()["spent"] == f"{cost:f}" and told[0].to_dict()["limit"] == "0.002"


async def test_budget_and_limiter_count_a_turn_once() -> None:
    """A limiter with input_tokens_per_minute and a Budget share one count per turn
    (on Anthropic and Gemini each count is a request to the backend)."""
    from cuca import RateLimiter

    limiter = RateLimiter(input_tokens_per_minute=10**6)
    async with open_replay_server(TEXT) as server:
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", api_key="k",
                              rate_limiter=limiter, plugins=[Budget(tokens=10**6)]) as c:
            counted = 0
            adapter = c.adapter()  # what the turn's backend counts with
            count_tokens = adapter.count_tokens

            async def counting(request: UnifiedRequest, send: Any) -> Any:
                nonlocal counted
                counted += 1
                return await count_tokens(request, send)

            adapter.count_tokens = counting  # type: ignore[method-assign]
            await c.generate(REQUEST)
    assert counted == 1, f"one turn was counted {counted} times"


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


class Events(CucaPlugin):
    """Records, per turn (numbered from 0 in the order they start), what its observer
    was told: ``("warning", unit)`` and ``("end", status)``."""

    name = "events"

    def __init__(self) -> None:
        self.turns: list[list[tuple[str, str]]] = []

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        seen: list[tuple[str, str]] = []
        self.turns.append(seen)

        class Watcher(TurnObserver):
            def on_budget_warning(self, warning: BudgetWarning) -> None:
                seen.append(("warning", warning.unit))

            def on_end(self, end: TurnOutcome) -> None:
                seen.append(("end", end.status))

        return Watcher()


async def test_budget_warning_reaches_the_crossing_turns_observers_once() -> None:
    """1163 tokens a turn, a cap of 3600 warned at 0.5: the second turn's charge (2326,
    65%) crosses; its observer is told once, before its end; the first and third never."""
    events, told = Events(), []
    budget = Budget(tokens=3600, warn_at=0.5, on_warn=told.append)
    async with open_replay_server(TEXT) as server:
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", api_key="k",
                              plugins=[budget, events]) as c:
            for _ in range(3):
                await c.generate(REQUEST)
    assert events.turns == [
        [("end", "ok")],
        [("warning", "tokens"), ("end", "ok")],
        [("end", "ok")],
    ]
    assert [(w.unit, w.spent, w.limit) for w in told] == [("tokens", 2326.0, 3600.0)]
    assert all(type(n) is int for w in told for n in (w.spent, w.limit))  # tokens: ints


async def test_budget_warning_once_across_a_shared_store(tmp_path: Path) -> None:
    """Two budgets sharing one SQLite store (two processes' worth): the turn that crosses
    is told, on whichever client; no turn of either is told again in that window."""
    store = SqliteStore(tmp_path / "shared.db")
    one, two = Events(), Events()
    first = Budget(tokens=3600, warn_at=0.5, store=store)
    second = Budget(tokens=3600, warn_at=0.5, store=store)
    async with open_replay_server(TEXT) as server:
        url = f"{server.url}/v1"
        async with CucaClient(OPENAI, base_url=url, api_key="k", plugins=[first, one]) as a, \
                CucaClient(OPENAI, base_url=url, api_key="k", plugins=[second, two]) as b:
            await a.generate(REQUEST)  # 1163: under half
            await b.generate(REQUEST)  # 2326: crosses, on the second client
            await a.generate(REQUEST)  # 3489: past it already
    await store.aclose()
    assert one.turns == [[("end", "ok")], [("end", "ok")]]
    assert two.turns == [[("warning", "tokens"), ("end", "ok")]]


async def test_budget_warning_of_a_cancelled_turn_before_its_end() -> None:
    """A turn dropped mid-way is charged its whole reservation; when that crosses, its
    observer is told before its (cancelled) end, and the spending is exact."""
    events = Events()
    async with open_replay_server(SLOW) as server:
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", api_key="k") as plain:
            prompt = (await plain.count_tokens(REQUEST)).tokens
        projected = prompt + 64
        budget = Budget(tokens=int(projected * 1.5), warn_at=0.5)
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", api_key="k",
                              plugins=[budget, events]) as c:
            async with c.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break
    assert events.turns == [[("warning", "tokens"), ("end", "cancelled")]]
    assert (await budget.spent())["tokens"] == projected


async def test_budget_warning_in_the_session_log_and_the_trace(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cuca import SessionLog
    from cuca.observers.otel import BUDGET_WARNING_EVENT, OtelPlugin

    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    budget = Budget(tokens=3600, warn_at=0.5)
    with SessionLog(tmp_path / "log.db") as log:
        plugins = [budget, log, OtelPlugin(tracer_provider=tracer)]
        async with open_replay_server(TEXT) as server:
            async with CucaClient(OPENAI, base_url=f"{server.url}/v1", api_key="k",
                                  plugins=plugins) as c:
                for _ in range(3):
                    await c.generate(REQUEST)
        turns = log.turns()
    assert [t.budget_warnings for t in turns] == [
        (),
        ({"unit": "tokens", "spent": 2326.0, "limit": 3600.0, "fraction": 2326 / 3600},),
        (),
    ]
    spans = sorted(exporter.get_finished_spans(), key=lambda span: span.start_time or 0)
    events = [[e for e in span.events if e.name == BUDGET_WARNING_EVENT] for span in spans]
    assert [len(found) for found in events] == [0, 1, 0]
    attributes = dict(events[1][0].attributes or {})
    assert attributes == {"cuca.budget.unit": "tokens", "cuca.budget.spent": 2326.0,
                          "cuca.budget.limit": 3600.0, "cuca.budget.fraction": 2326 / 3600}


async def test_budget_warning_once_per_window() -> None:
    """A 60 s window: the crossing turn of each window is told, once in each."""
    now = [1000.0]
    events = Events()
    budget = Budget(tokens=3600, warn_at=0.5, window=60, clock=lambda: now[0])
    async with open_replay_server(TEXT) as server:
        async with CucaClient(OPENAI, base_url=f"{server.url}/v1", api_key="k",
                              plugins=[budget, events]) as c:
            for _ in range(3):
                await c.generate(REQUEST)
            now[0] += 60
            for _ in range(2):
                await c.generate(REQUEST)
    told = [n for n, seen in enumerate(events.turns) if ("warning", "tokens") in seen]
    assert told == [1, 4]


@pytest.mark.parametrize("unit", ["tokens", "usd"])
async def test_budget_admits_a_turn_that_fits_exactly(unit: str) -> None:
    """docs/limits.md: a turn is refused when it "would spend past a cap": one whose
    projection is the whole budget goes out; one a hair over is refused, nothing sent.
    ``count_tokens=False``: "Hello?" is 2 tokens by the text estimate (6 / 4, rounded
    up), plus its ``max_tokens`` of 64."""
    exact = Budget(tokens=66, count_tokens=False)
    projection = exact.project(REQUEST.with_provider(OPENAI), 2)
    assert projection.tokens == 66 and projection.usd is None
    priced = Budget(usd=1.0, count_tokens=False).project(REQUEST.with_provider(OPENAI), 2)
    assert priced.usd is not None
    whole = {"tokens": 66.0, "usd": priced.usd}[unit]
    async with open_replay_server(TEXT) as server:
        async with client(server.url, Budget(**{unit: whole}, count_tokens=False)) as c:
            await c.generate(REQUEST)
        assert len(server.requests) == 1
        over = Budget(**{unit: 65 if unit == "tokens" else whole * Decimal("0.999")},
                      count_tokens=False)
        async with client(server.url, over) as c:
            with pytest.raises(BudgetExceeded) as caught:
                await c.generate(REQUEST)
        assert (caught.value.spent, caught.value.projected) == (0.0, whole)
    assert len(server.requests) == 1
    if unit == "usd":
        assert f"this turn projects ${whole:.6f}, the limit is $" in str(caught.value)
    if unit == "tokens":
        assert str(caught.value).endswith(
            "tokens: spent and reserved 0 tokens, this turn projects 66 tokens, "
            "the limit is 65 tokens"
        )


async def test_budget_project_estimates_the_prompt_when_not_given() -> None:
    """``Budget.project(request)``: the prompt estimated from the text (6 characters:
    2 tokens) plus ``max_tokens``; an unset ``max_tokens`` projects 4096."""
    budget = Budget(tokens=10**6)
    assert budget.project(REQUEST).tokens == 2 + 64
    unset = UnifiedRequest.new("gpt-4o").add_user_message("Hello?")
    assert budget.project(unset).tokens == 2 + 4096


async def test_budget_spent_is_zero_before_any_turn_in_each_window() -> None:
    """``spent()`` of a window nothing was charged in: 0 in every unit, whatever the
    window before spent."""
    now = [1000.0]
    budget = Budget(usd=1.0, tokens=10**6, window=60, clock=lambda: now[0])
    assert await budget.spent() == {"usd": 0.0, "tokens": 0.0}
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)
    assert (await budget.spent())["tokens"] == 1163
    now[0] += 60
    assert await budget.spent() == {"usd": 0.0, "tokens": 0.0}


async def test_budget_settled_turn_releases_its_reservation() -> None:
    """A turn's reservation is replaced by its charge when it ends: with 1163 tokens
    charged and room for exactly one more projection (66), the next turn fits; a
    reservation left held would refuse it."""
    budget = Budget(tokens=1163 + 66, count_tokens=False)
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)
        await c.generate(REQUEST)
        with pytest.raises(BudgetExceeded) as caught:
            await c.generate(REQUEST)
    assert caught.value.spent == 2 * 1163
    assert len(server.requests) == 2


async def test_budget_unpriced_model_allowed_is_charged_nothing() -> None:
    """``on_unpriced="allow"``: a model without a price is counted at $0, its tokens
    at their count."""
    request = UnifiedRequest.new("my-own-model").add_user_message("Hi").set_max_tokens(8)
    budget = Budget(usd=0.5, tokens=10**6, on_unpriced="allow")
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(request)
    assert await budget.spent() == {"usd": 0.0, "tokens": 1163.0}


async def test_budget_warns_when_spending_reaches_warn_at_exactly() -> None:
    """1163 tokens of a 2326 cap is exactly the 0.5 asked: that turn warns."""
    told: list[BudgetWarning] = []
    budget = Budget(tokens=2326, warn_at=0.5, on_warn=told.append)
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)
    assert [(w.spent, w.fraction) for w in told] == [(1163.0, 0.5)]


async def test_budget_window_state_expires_with_its_window() -> None:
    """A windowed budget's state is written with a lifetime (two windows), admission
    and settling alike: a window's key does not stay in a shared store for ever."""
    from cuca.store import MemoryStore

    ttls: list[float | None] = []

    class Recording(MemoryStore):
        async def update(self, key: str, change: Any, ttl: float | None = None) -> Any:
            ttls.append(ttl)
            return await super().update(key, change, ttl)

    budget = Budget(tokens=10**6, window=60, store=Recording())
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)
    assert ttls == [120, 120]


def test_budget_refuses_each_bad_setting_by_name() -> None:
    """A cap or window that is not a positive number (0, a negative, a bool) is refused
    naming it; so is a store that is not a cuca store; "refuse" and "allow" are the
    two ``on_unpriced`` answers, and a tokens-only budget allows unpriced models."""
    from cuca import ConfigurationError

    with pytest.raises(ConfigurationError) as caught:
        Budget()
    assert str(caught.value) == "configuration error: a Budget needs usd= or tokens="
    for name, value in [("usd", 0), ("tokens", -5), ("window", True), ("usd", True)]:
        with pytest.raises(ConfigurationError) as caught:
            Budget(**{"tokens": 10, name: value})
        assert str(caught.value).endswith(f"{name} must be a positive number, not {value!r}")
    with pytest.raises(ConfigurationError) as caught:
        Budget(tokens=10, store={})  # type: ignore[arg-type]
    assert str(caught.value).endswith("store must be a cuca store, not {} (dict)")
    assert Budget(usd=1, on_unpriced="refuse").on_unpriced == "refuse"
    assert Budget(usd=1).on_unpriced == "refuse"
    assert Budget(tokens=1).on_unpriced == "allow"


async def test_budget_unpriced_refusal_says_what_was_spent_and_the_limit() -> None:
    """A model without a price, under a ``usd`` budget: refused before anything is sent,
    with the dollars spent so far and the limit, nothing projected, and how to allow it."""
    budget = Budget(usd=1.0)
    unpriced = UnifiedRequest.new("my-own-model").add_user_message("Hi").set_max_tokens(8)
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)
        spent = (await budget.spent())["usd"]
        with pytest.raises(BudgetExceeded) as caught:
            await c.generate(unpriced)
    error = caught.value
    assert (error.unit, error.spent, error.projected, error.limit) == ("usd", spent, None, 1.0)
    assert spent > 0
    assert str(error).endswith(
        "no price is known for 'my-own-model' on openai "
        '(on_unpriced="refuse"; pass on_unpriced="allow" to count it at $0)'
    )
    assert len(server.requests) == 1


async def test_budget_defaults_warn_at_eighty_percent_under_the_key_cuca_budget() -> None:
    """docs/limits.md: ``warn_at`` is 0.8 by default, and the state lives under the key
    "cuca:budget" (budgets sharing a store and a key share their spending)."""
    from cuca.store import MemoryStore

    told: list[BudgetWarning] = []
    store = MemoryStore()
    budget = Budget(tokens=1453, count_tokens=False, on_warn=told.append, store=store)
    async with open_replay_server(TEXT) as server, client(server.url, budget) as c:
        await c.generate(REQUEST)  # 1163 of 1453: 80.04%
    assert [w.unit for w in told] == ["tokens"]
    assert (await store.get("cuca:budget"))["spent"] == {"tokens": "1163"}  # a decimal string
    assert await Budget(tokens=1453, store=store).spent() == {"tokens": 1163.0}


def test_budget_projects_prompt_and_output_at_the_models_prices() -> None:
    """The dollars projected grow with the prompt as with ``max_tokens``."""
    budget = Budget(usd=1.0)
    request = REQUEST.with_provider(OPENAI)
    small, large = budget.project(request, 10), budget.project(request, 10_000)
    assert small.usd is not None and large.usd is not None and large.usd > small.usd
    assert budget.project(request.set_max_tokens(1000), 10).usd > small.usd  # type: ignore[operator]


async def test_budget_turn_outliving_its_reservation_is_still_charged() -> None:
    """A reservation older than an hour is taken for a dead process's and dropped by the
    next admission; the turn that held it, still alive, is charged its exact cost when it
    ends all the same (its reservation already gone: no error)."""
    now = [0.0]
    budget = Budget(tokens=10**6, count_tokens=False, clock=lambda: now[0])
    async with open_replay_server([SLOW, TEXT]) as server, client(server.url, budget) as c:
        async with c.generate_stream(REQUEST) as first:
            async for _ in first:
                break  # admitted, streaming
            now[0] += 3601
            await c.generate(REQUEST)  # admitted: the first's reservation dropped
            async for _ in first:
                pass
    assert (await budget.spent())["tokens"] == 2 * 1163
