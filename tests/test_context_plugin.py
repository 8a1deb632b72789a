"""The compactor plugin (``cuca.Compactor``) driven by hand, fast and I/O-free: its
budget, its headroom, the order of its strategies, its report and its overflow error
(docs/context.md, "Compaction"), with a counter that counts characters so that every
figure can be checked by hand. The plugin inside a client is
``test_context_compactor.py``'s."""

from __future__ import annotations

import attrs
import pytest

from cuca import (
    CompactionReport,
    Compactor,
    ConfigurationError,
    ContextOverflowError,
    ModelInfo,
    Text,
    TokenCount,
    ToolDefinition,
    UnifiedRequest,
)
from cuca.context import (
    ClampMessages,
    ClearToolResults,
    DropOldestTurns,
    Shortened,
    Strategy,
    TokenTarget,
)
from cuca.types import CompactionStep


class Chars:
    """A counter: a request costs the characters of its messages' text; the window of
    every model is ``window``. It records what it was asked."""

    def __init__(self, window: int | None = 1000, exact: bool = True) -> None:
        self.window = window
        self.exact = exact
        self.counts = 0
        self.windows: list[str] = []

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount:
        self.counts += 1
        tokens = sum(len(m.text()) for m in request.messages)
        return TokenCount(tokens, exact=self.exact, method="chars")

    async def model_info(self, model: str = "") -> ModelInfo:
        self.windows.append(model)
        return ModelInfo(model, self.window)


class Shorten(Strategy):
    """A strategy that drops the first message (or, with ``nothing``, has nothing to
    remove), recording the budget it was given."""

    def __init__(self, name: str, nothing: bool = False) -> None:
        self.name = name
        self.nothing = nothing
        self.targets: list[TokenTarget] = []

    async def apply(self, request: UnifiedRequest, budget: TokenTarget) -> Shortened | None:
        self.targets.append(budget)
        if self.nothing:
            return None
        shorter = attrs.evolve(request, messages=request.messages[1:])
        return Shortened(shorter, f"{self.name} dropped one")


def conversation(*sizes: int) -> UnifiedRequest:
    """User and assistant messages of ``sizes`` characters, alternating, the last a
    user's."""
    request = UnifiedRequest.new("m")
    for left, size in zip(range(len(sizes) - 1, -1, -1), sizes, strict=True):
        add = request.add_user_message if left % 2 == 0 else request.add_assistant_message
        request = add("x" * size)
    return request


# -- the budget ------------------------------------------------------------------------


def test_compactor_takes_a_budget_in_tokens_or_a_fraction_up_to_one() -> None:
    assert Compactor(Chars(), budget=1).budget == 1
    assert Compactor(Chars(), budget=1.0).budget == 1.0
    assert Compactor(Chars(), budget=0.01).budget == 0.01
    with pytest.raises(ConfigurationError, match=r"budget must be tokens \(int\) or a fraction"):
        Compactor(Chars(), budget=0)
    with pytest.raises(ConfigurationError, match=r"budget must be tokens \(int\) or a fraction"):
        Compactor(Chars(), budget=-0.5)
    with pytest.raises(ConfigurationError, match=r"budget must be tokens .*not False"):
        Compactor(Chars(), budget=False)
    with pytest.raises(ConfigurationError, match=r"a fractional budget is at most 1.0, not 1.01"):
        Compactor(Chars(), budget=1.01)


def test_compactor_takes_a_headroom_from_zero_to_below_one() -> None:
    assert Compactor(Chars(), budget=10).headroom == 0.0
    assert Compactor(Chars(), budget=10, headroom=0.0).headroom == 0.0
    assert Compactor(Chars(), budget=10, headroom=0.99).headroom == 0.99
    for bad in (-0.01, 1.0, 1.5):
        with pytest.raises(ConfigurationError, match=r"headroom is a fraction in \[0, 1\), not"):
            Compactor(Chars(), budget=10, headroom=bad)


def test_compactor_default_strategies_clear_clamp_then_drop() -> None:
    strategies = Compactor(Chars(), budget=10).strategies
    assert [type(s) for s in strategies] == [ClearToolResults, ClampMessages, DropOldestTurns]
    assert [s.name for s in strategies] == [
        "clear_tool_results",
        "clamp_messages",
        "drop_oldest_turns",
    ]
    clear, clamp, _ = strategies
    assert isinstance(clear, ClearToolResults) and clear.keep_last == 2
    assert isinstance(clamp, ClampMessages) and clamp.max_chars == 2000
    mine = [Shorten("a")]
    assert Compactor(Chars(), budget=10, strategies=mine).strategies == mine


async def test_compactor_budget_in_tokens_is_the_tokens_for_every_model() -> None:
    counter = Chars(window=None)
    compactor = Compactor(counter, budget=300)
    assert await compactor.tokens_for("m") == 300
    assert counter.windows == []


async def test_compactor_fraction_of_the_window_asked_once_per_model() -> None:
    counter = Chars(window=1001)
    compactor = Compactor(counter, budget=0.5)
    assert await compactor.tokens_for("m") == 500  # rounded down
    assert await compactor.tokens_for("m") == 500
    assert counter.windows == ["m"]
    assert await compactor.tokens_for("n") == 500
    assert counter.windows == ["m", "n"]


async def test_compactor_fraction_asks_the_given_counter_when_it_has_none() -> None:
    backend = Chars(window=2000)
    assert await Compactor(budget=0.25).tokens_for("m", backend) == 500
    assert backend.windows == ["m"]
    with pytest.raises(ConfigurationError) as alone:
        await Compactor(budget=0.25).tokens_for("m")
    assert alone.value.message == (
        "a Compactor without a counter counts with its client's backend: give it in "
        "plugins=[...], or pass Compactor(counter, ...) to call on_request"
    )
    with pytest.raises(ConfigurationError) as unknown:
        await Compactor(budget=0.25).tokens_for("m", Chars(window=None))
    assert unknown.value.message == (
        "a fractional budget needs 'm''s window, and nothing says it: give the budget in tokens"
    )


async def test_compactor_counts_with_its_own_counter_before_the_turns_backend() -> None:
    own, backend = Chars(window=100), Chars(window=400)
    compactor = Compactor(own, budget=0.5)
    request = conversation(10, 10, 10)
    assert await compactor.prepare_turn(request, backend) is request
    assert (own.counts, own.windows) == (1, ["m"])
    assert (backend.counts, backend.windows) == (0, [])
    alone = Compactor(budget=0.5)
    assert await alone.prepare_turn(request, backend) is request
    assert (backend.counts, backend.windows) == (1, ["m"])


# -- compaction ------------------------------------------------------------------------


async def test_compactor_sends_a_request_that_fits_exactly_as_it_is() -> None:
    counter = Chars()
    request = conversation(10, 10, 10)
    strategy = Shorten("a")
    assert await Compactor(counter, budget=30, strategies=[strategy]).on_request(request) is request
    assert counter.counts == 1 and strategy.targets == []


async def test_compactor_aims_the_strategies_at_its_headroom() -> None:
    counter = Chars()
    request = conversation(40, 40, 40)
    strategy = Shorten("a")
    after = await Compactor(counter, budget=100, strategies=[strategy]).on_request(request)
    assert after.compaction is not None
    (budget,) = strategy.targets
    assert (budget.tokens, budget.goal) == (100, 100)
    assert await budget.count(request) == 120
    roomy = Shorten("b")
    await Compactor(counter, budget=100, headroom=0.25, strategies=[roomy]).on_request(request)
    assert (roomy.targets[0].tokens, roomy.targets[0].goal) == (100, 75)


async def test_compactor_applies_strategies_in_order_until_the_request_fits() -> None:
    nothing, first, second, unused = (
        Shorten("n", nothing=True),
        Shorten("a"),
        Shorten("b"),
        Shorten("c"),
    )
    request = conversation(10, 20, 30, 40)
    counter = Chars(exact=False)
    compactor = Compactor(counter, budget=70, strategies=[nothing, first, second, unused])
    after = await compactor.on_request(request)
    assert [m.text() for m in after.messages] == ["x" * 30, "x" * 40]
    assert after.compaction == CompactionReport(
        100,
        70,
        70,
        (
            CompactionStep("a", "a dropped one", 100, 90),
            CompactionStep("b", "b dropped one", 90, 70),
        ),
        exact=False,
    )
    assert len(nothing.targets) == 1 and unused.targets == []
    assert counter.counts == 3  # once before, once after each change


async def test_compactor_report_is_exact_when_the_counter_is() -> None:
    after = await Compactor(Chars(), budget=45, strategies=[Shorten("a")]).on_request(
        conversation(10, 40)
    )
    assert after.compaction is not None and after.compaction.exact


# -- overflow --------------------------------------------------------------------------


async def test_compactor_overflow_names_what_remains_and_what_was_done() -> None:
    request = (
        UnifiedRequest.new("m")
        .add_system_message("s" * 20)
        .add_user_message("a" * 100)
        .add_assistant_message("b" * 100)
        .add_user_message("c" * 100)
        .add_assistant_message("d" * 100)
        .add_user_message("e" * 10)
        .add_tool(ToolDefinition("lookup"))
        .add_tool(ToolDefinition("search"))
    )
    clamp = ClampMessages(max_chars=50)  # 100 characters to 93: 430 in all to 402
    with pytest.raises(ContextOverflowError) as info:
        await Compactor(
            Chars(), budget=20, strategies=[Shorten("n", nothing=True), clamp]
        ).on_request(request)
    error = info.value
    assert (error.limit, error.requested) == (20, 402)
    assert error.message == (
        "compaction could not fit the request in 20 tokens: 402 remain in the first system "
        "message, the latest user message and what follows it, 2 older turns no strategy "
        "removed, 2 tool definitions, which cannot be removed (clamp_messages: 4 blocks "
        "clamped (200 characters))"
    )


async def test_compactor_overflow_of_a_request_with_nothing_to_name() -> None:
    class Fixed(Chars):
        async def count_tokens(self, request: UnifiedRequest) -> TokenCount:
            return TokenCount(99, exact=True)

    request = UnifiedRequest.new("m").add_assistant_message(Text("hi"))
    drop, again = Shorten("a"), Shorten("b")
    with pytest.raises(ContextOverflowError) as info:
        await Compactor(Fixed(), budget=10, strategies=[drop, again]).on_request(request)
    assert info.value.message == (
        "compaction could not fit the request in 10 tokens: 99 remain in the request, which "
        "cannot be removed (a: a dropped one; b: b dropped one)"
    )
    assert str(info.value).startswith("context overflow: compaction could not fit")
    replies = request.add_assistant_message("more").add_assistant_message("still")
    with pytest.raises(ContextOverflowError) as left:
        await Compactor(Fixed(), budget=10, strategies=[Shorten("a")]).on_request(replies)
    assert left.value.message == (  # no user message: none is named
        "compaction could not fit the request in 10 tokens: 99 remain in 1 older turns no "
        "strategy removed, which cannot be removed (a: a dropped one)"
    )
