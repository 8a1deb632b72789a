"""The compactor plugin: shortens a request that does not fit its budget before it is
sent, with strategies applied in order until it fits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from cuca.errors import ConfigurationError, ContextOverflowError
from cuca.plugins import CucaPlugin
from cuca.types import (
    CompactionReport,
    CompactionStep,
    MessageRole,
    ModelInfo,
    TokenCount,
    UnifiedRequest,
)

from .conversation import layout
from .strategies import ClampMessages, ClearToolResults, DropOldestTurns, Strategy, TokenTarget

__all__ = ["Compactor", "TokenCounter"]


class TokenCounter(Protocol):
    """What counts a request and knows a model's window: any cuca client."""

    async def count_tokens(self, request: UnifiedRequest) -> TokenCount: ...

    async def model_info(self, model: str = "") -> ModelInfo: ...


def _default_strategies() -> list[Strategy]:
    return [ClearToolResults(), ClampMessages(), DropOldestTurns()]


class Compactor(CucaPlugin):
    """A plugin whose ``on_request`` shortens a request that does not fit ``budget``.

    ``budget`` is a number of prompt tokens (an ``int``), or a fraction of the model's
    window (a ``float`` in (0, 1], the window from ``model_info``). As a client's
    plugin it counts with the turn's own backend (``count_tokens``, ``model_info``):
    ``plugins=[Compactor(budget=400)]`` is all it takes. ``counter`` counts in its
    place when given (any client, or an object with those two methods), and is needed
    to call :meth:`on_request` by hand.
    ``strategies`` run in order until the request fits (default: clear old tool
    results, clamp oversized messages, drop the oldest turns).
    ``headroom`` is the share of the budget a compaction leaves free (0.25: down to 75%
    of it), so that the next turns fit without a new cut and reuse the cached prefix.
    A request that fits is sent as it is; one that still does not fit after every
    strategy fails the turn with :class:`~cuca.errors.ContextOverflowError` saying
    what could not be removed. What was done is the request's and the response's
    ``compaction`` (a :class:`~cuca.types.CompactionReport`), and observers see it in
    ``TurnObserver.on_compaction``.
    """

    name = "compactor"

    def __init__(
        self,
        counter: TokenCounter | None = None,
        *,
        budget: int | float,
        strategies: Sequence[Strategy] | None = None,
        headroom: float = 0.0,
    ) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int | float) or budget <= 0:
            raise ConfigurationError(f"budget must be tokens (int) or a fraction, not {budget!r}")
        if isinstance(budget, float) and budget > 1:
            raise ConfigurationError(f"a fractional budget is at most 1.0, not {budget}")
        if not 0.0 <= headroom < 1.0:
            raise ConfigurationError(f"headroom is a fraction in [0, 1), not {headroom!r}")
        self.counter = counter
        self.budget = budget
        self.headroom = headroom
        self.strategies = list(strategies) if strategies is not None else _default_strategies()
        self._windows: dict[str, int] = {}

    async def tokens_for(self, model: str, counter: TokenCounter | None = None) -> int:
        """The budget in tokens for ``model`` (its window from ``counter``, else the
        compactor's own)."""
        if isinstance(self.budget, int):
            return self.budget
        if model not in self._windows:
            info = await self._counter(counter).model_info(model)
            if info.context_window is None:
                raise ConfigurationError(
                    f"a fractional budget needs {model!r}'s window, and nothing says it: "
                    "give the budget in tokens"
                )
            self._windows[model] = info.context_window
        return int(self._windows[model] * self.budget)

    def _counter(self, given: TokenCounter | None) -> TokenCounter:
        counter = self.counter or given
        if counter is None:
            raise ConfigurationError(
                "a Compactor without a counter counts with its client's backend: give it "
                "in plugins=[...], or pass Compactor(counter, ...) to call on_request"
            )
        return counter

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        """``request``, shortened to fit, counted with the compactor's own counter."""
        return await self.prepare_turn(request, None)

    async def prepare_turn(
        self, request: UnifiedRequest, backend: TokenCounter | None
    ) -> UnifiedRequest:
        """``request``, shortened to fit, counted with the compactor's counter, else
        with ``backend`` (a turn's *before* seam gives its own: :mod:`cuca.seams`)."""
        counter = self._counter(backend)

        async def count(request: UnifiedRequest) -> int:
            return (await counter.count_tokens(request)).tokens

        tokens = await self.tokens_for(request.model, counter)
        budget = TokenTarget(tokens, count, int(tokens * (1 - self.headroom)))
        first = await counter.count_tokens(request)
        if first.tokens <= budget.tokens:
            return request
        current, tokens = request, first.tokens
        steps: list[CompactionStep] = []
        for strategy in self.strategies:
            change = await strategy.apply(current, budget)
            if change is None:
                continue
            after = await count(change.request)
            steps.append(CompactionStep(strategy.name, change.removed, tokens, after))
            current, tokens = change.request, after
            if tokens <= budget.tokens:
                break
        if tokens > budget.tokens:
            raise _overflow(current, tokens, budget.tokens, steps)
        report = CompactionReport(first.tokens, tokens, budget.tokens, tuple(steps), first.exact)
        return attrs.evolve(current, compaction=report)


def _overflow(
    request: UnifiedRequest, tokens: int, budget: int, steps: Sequence[CompactionStep]
) -> ContextOverflowError:
    """The error of a request no strategy could fit: what is left, and why it stays."""
    pieces = layout(request.messages)
    kept = []
    if pieces.head is not None:
        kept.append("the first system message")
    if any(m.role is MessageRole.USER for m in request.messages):
        kept.append("the latest user message and what follows it")
    if pieces.turns:
        kept.append(f"{len(pieces.turns)} older turns no strategy removed")
    if request.tools:
        kept.append(f"{len(request.tools)} tool definitions")
    done = "; ".join(f"{s.strategy}: {s.removed}" for s in steps) or "no strategy removed anything"
    message = (
        f"compaction could not fit the request in {budget} tokens: {tokens} remain in "
        f"{', '.join(kept) or 'the request'}, which cannot be removed ({done})"
    )
    return ContextOverflowError(message, limit=budget, requested=tokens)
