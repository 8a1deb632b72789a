"""``Budget``: a cap on dollars or tokens spent, that concurrent turns cannot overshoot
together (a plugin; its state in a shared store for many processes).

Money is a :class:`~decimal.Decimal` here as everywhere in cuca (``response.cost``):
dollars are summed exactly and kept in the store as decimal strings; token figures are
ints. A figure is ``Decimal`` for ``"usd"``, ``int`` for ``"tokens"``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

import attrs

from cuca._checks import kind
from cuca.admission import Counter, estimate_tokens, estimated
from cuca.cost import turn_cost
from cuca.errors import BudgetExceeded, ConfigurationError
from cuca.plugins import BudgetWarning, CucaPlugin, TurnOutcome
from cuca.store import MemoryStore, Store
from cuca.turn import AttemptHead
from cuca.types import TokenUsage, UnifiedRequest

__all__ = ["Budget", "BudgetWarning"]

DEFAULT_MAX_TOKENS = 4096
"""The output tokens projected for a request that sets no ``max_tokens``."""

RESERVATION_TTL = 3600.0
"""Seconds after which a reservation left by a process that died is dropped."""


Figure = Decimal | int
"""An amount in a budget's unit: ``Decimal`` dollars for ``"usd"``, ``int`` for ``"tokens"``."""


@attrs.frozen
class _Projection:
    usd: Decimal | None
    tokens: int


class Budget(CucaPlugin):
    """Refuses a turn whose projected cost would pass the budget, and charges each
    turn's exact cost when it ends. A plugin: ``CucaClient(..., plugins=[budget])``.

    - ``usd``: dollars; a turn's projection is its prompt tokens as the client counts
      them (``count_tokens``; the text length / 4 where it cannot) plus
      ``max_tokens`` (or :data:`DEFAULT_MAX_TOKENS`) at the model's prices
      (genai-prices), and its charge the exact cost of its usage
      (``count_tokens=False``: the text-length estimate, without a counting request);
    - ``tokens``: prompt plus completion tokens, projected the same way;
    - ``window``: seconds after which spending starts again from 0 (fixed windows
      aligned on the epoch); ``None``: for ever;
    - ``warn_at``: once per window and unit, when spending crosses that fraction of a
      limit, the observers of the turn whose charge crossed it are told
      (``TurnObserver.on_budget_warning``: the session log records it, the trace plugin
      adds a span event), and ``on_warn(BudgetWarning)`` is called when given;
    - ``on_unpriced``: a model without a price is ``"refuse"``d (the default when
      ``usd`` is set) or ``"allow"``ed (counted at 0 dollars).

    The projection is reserved before the request goes out and settled when the turn
    ends, so concurrent turns are admitted only while their reservations fit. A turn
    that fails is charged nothing (no usage); one cancelled mid-way is charged its
    reservation (the provider bills what it generated, which cuca cannot know).
    """

    name = "budget"

    def __init__(
        self,
        usd: Decimal | float | None = None,
        tokens: int | None = None,
        window: float | None = None,
        store: Store | None = None,
        *,
        warn_at: float | None = 0.8,
        on_warn: Callable[[BudgetWarning], None] | None = None,
        on_unpriced: Literal["allow", "refuse"] | None = None,
        key: str = "cuca:budget",
        count_tokens: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if usd is None and tokens is None:
            raise ConfigurationError("a Budget needs usd= or tokens=")
        for name, value in (("usd", usd), ("tokens", tokens), ("window", window)):
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise ConfigurationError(f"{name} must be a positive number, not {value!r}")
        if on_unpriced not in (None, "allow", "refuse"):
            raise ConfigurationError(
                f'on_unpriced must be "allow" or "refuse", not {on_unpriced!r}'
            )
        if store is not None and not isinstance(store, Store):
            raise ConfigurationError(f"store must be a cuca store, not {kind(store)}")
        self.usd = None if usd is None else _decimal(usd)
        self.tokens = tokens
        self.window = window
        self.store: Store = store if store is not None else MemoryStore()
        self.warn_at = warn_at
        self.on_warn = on_warn
        self.on_unpriced = on_unpriced or ("refuse" if usd is not None else "allow")
        self.key = key
        self.count_tokens = count_tokens
        self.clock = clock

    def __repr__(self) -> str:
        return f"Budget(usd={self.usd}, tokens={self.tokens}, window={self.window})"

    def _key(self, now: float) -> tuple[str, float | None]:
        if self.window is None:
            return self.key, None
        return f"{self.key}:{int(now // self.window)}", 2 * self.window

    def _limits(self) -> dict[str, Decimal]:
        limits: dict[str, Decimal] = {}
        if self.usd is not None:
            limits["usd"] = self.usd
        if self.tokens is not None:
            limits["tokens"] = Decimal(self.tokens)
        return limits

    def project(self, request: UnifiedRequest, prompt: int | None = None) -> _Projection:
        """What ``request`` may cost at most: dollars (``None`` when unpriced) and tokens,
        with ``prompt`` tokens (estimated from its text when not given)."""
        prompt = estimate_tokens(request) if prompt is None else prompt
        output = request.max_tokens or DEFAULT_MAX_TOKENS
        usage = TokenUsage(prompt_tokens=prompt, completion_tokens=output)
        usd = turn_cost(request.provider, request.model, usage) if self.usd is not None else None
        return _Projection(usd, prompt + output)

    async def spent(self) -> dict[str, Figure]:
        """What the current window has spent so far (reservations not included):
        ``Decimal`` dollars under ``"usd"``, an ``int`` under ``"tokens"``."""
        state = _state(await self.store.get(self._key(self.clock())[0]))
        return {unit: _figure(unit, _amount(state["spent"], unit)) for unit in self._limits()}

    async def admit(self, request: UnifiedRequest, count: Counter = estimated) -> _Reservation:
        """Reserve the turn's projection (its prompt counted by ``count``), or raise
        :class:`BudgetExceeded`."""
        prompt = await count(request) if self.count_tokens else estimate_tokens(request)
        projection = self.project(request, prompt)
        if self.usd is not None and projection.usd is None and self.on_unpriced == "refuse":
            spent = (await self.spent()).get("usd", Decimal(0))
            raise BudgetExceeded(
                "usd",
                spent,
                None,
                self.usd,
                f"no price is known for {request.model!r} on {request.provider.kind} "
                '(on_unpriced="refuse"; pass on_unpriced="allow" to count it at $0)',
            )
        amounts = {"usd": projection.usd or Decimal(0), "tokens": Decimal(projection.tokens)}
        amounts = {unit: amounts[unit] for unit in self._limits()}
        now = self.clock()
        key, ttl = self._key(now)
        ident, limits = uuid.uuid4().hex, self._limits()
        refusal = await self.store.update(
            key, lambda old: _reserve(old, now, ident, amounts, limits), ttl
        )
        if refusal is not None:
            unit, spent = refusal
            raise BudgetExceeded(
                unit,
                _figure(unit, spent),
                _figure(unit, amounts[unit]),
                _figure(unit, limits[unit]),
                f"{unit}: spent and reserved {_shown(unit, spent)}, this turn projects "
                f"{_shown(unit, amounts[unit])}, the limit is {_shown(unit, limits[unit])}",
            )
        return _Reservation(self, key, ttl, ident, amounts)

    async def reserve_batch(
        self, requests: Sequence[UnifiedRequest], rate: Decimal, ttl: float
    ) -> dict[str, Any]:
        """Reserve what a batch job's ``requests`` may cost at most, in one reservation:
        each request's projection (its prompt estimated from its text: counting ten
        thousand prompts would take ten thousand requests) with dollars at ``rate`` of
        the list price (the vendor's batch rate), held ``ttl`` seconds. Raises
        :class:`BudgetExceeded` as :meth:`admit` does. The reservation is returned as
        JSON: the job keeps it in its record, and :meth:`settle_batch` (in this process
        or another sharing the store) charges it when the results are read."""
        amounts = {"usd": Decimal(0), "tokens": Decimal(0)}
        for request in requests:
            projection = self.project(request)
            if self.usd is not None and projection.usd is None and self.on_unpriced == "refuse":
                spent = (await self.spent()).get("usd", Decimal(0))
                raise BudgetExceeded(
                    "usd",
                    spent,
                    None,
                    self.usd,
                    f"no price is known for {request.model!r} on {request.provider.kind} "
                    '(on_unpriced="refuse"; pass on_unpriced="allow" to count it at $0)',
                )
            amounts["usd"] += (projection.usd or Decimal(0)) * rate
            amounts["tokens"] += projection.tokens
        limits = self._limits()
        amounts = {unit: amounts[unit] for unit in limits}
        now = self.clock()
        key, window_ttl = self._key(now)
        ident = uuid.uuid4().hex
        refusal = await self.store.update(
            key, lambda old: _reserve(old, now, ident, amounts, limits, ttl), window_ttl
        )
        if refusal is not None:
            unit, spent = refusal
            raise BudgetExceeded(
                unit,
                _figure(unit, spent),
                _figure(unit, amounts[unit]),
                _figure(unit, limits[unit]),
                f"{unit}: spent and reserved {_shown(unit, spent)}, this batch projects "
                f"{_shown(unit, amounts[unit])}, the limit is {_shown(unit, limits[unit])}",
            )
        stored = {unit: str(amount) for unit, amount in amounts.items()}  # JSON, exact
        return {"budget": self.key, "key": key, "ttl": window_ttl, "id": ident, "amounts": stored}

    async def settle_batch(
        self, reservation: Mapping[str, Any], usd: Decimal | float, tokens: int
    ) -> list[BudgetWarning]:
        """Charge a batch job's exact cost (``usd`` at the batch rate, ``tokens``
        prompt plus completion) against its :meth:`reserve_batch` reservation, which is
        released; the warnings the charge crossed."""
        reserved: Mapping[str, Any] = reservation["amounts"]
        charge = {"usd": _decimal(usd), "tokens": Decimal(tokens)}
        charge = {unit: charge[unit] for unit in reserved}
        limits, warn_at, ident = self._limits(), self.warn_at, str(reservation["id"])
        ttl = reservation.get("ttl")
        warnings: list[BudgetWarning] = await self.store.update(
            str(reservation["key"]), lambda old: _settle(old, ident, charge, limits, warn_at), ttl
        )
        for warning in warnings:
            if self.on_warn is not None:
                self.on_warn(warning)
        return warnings

    async def _settle(
        self,
        key: str,
        ttl: float | None,
        ident: str,
        reserved: Mapping[str, Decimal],
        end: TurnOutcome,
    ) -> list[BudgetWarning]:
        charge = self._charge(reserved, end)
        limits, warn_at = self._limits(), self.warn_at
        warnings: list[BudgetWarning] = await self.store.update(
            key, lambda old: _settle(old, ident, charge, limits, warn_at), ttl
        )
        for warning in warnings:
            if self.on_warn is not None:
                self.on_warn(warning)
        return warnings

    def _charge(self, reserved: Mapping[str, Decimal], end: TurnOutcome) -> dict[str, Decimal]:
        if end.status == "cancelled":
            return dict(reserved)
        response = end.response
        if response is None or response.usage is None:
            return {unit: Decimal(0) for unit in reserved}
        charge: dict[str, Decimal] = {}
        if "usd" in reserved:
            cost: Decimal | None = response.cost
            charge["usd"] = Decimal(0) if cost is None else cost
        if "tokens" in reserved:
            tokens = 0 if response.cached else response.usage.total_tokens
            charge["tokens"] = Decimal(tokens)
        return charge


class _Reservation:
    """One admitted turn's reservation; settled once."""

    def __init__(
        self, budget: Budget, key: str, ttl: float | None, ident: str, amounts: dict[str, Decimal]
    ) -> None:
        self.budget, self.key, self.ttl, self.ident, self.amounts = budget, key, ttl, ident, amounts
        self.settled = False

    async def on_head(self, head: AttemptHead) -> None:
        """Headers say nothing about spending."""

    async def on_resend(self) -> None:
        """A resend is the same turn: its reservation covers it."""

    async def settle(self, end: TurnOutcome) -> list[BudgetWarning]:
        """Charge the turn; the warnings its charge crossed (for the turn's observers)."""
        if self.settled:
            return []
        self.settled = True
        return await self.budget._settle(self.key, self.ttl, self.ident, self.amounts, end)


def _state(old: Any) -> dict[str, Any]:
    state = dict(old) if isinstance(old, Mapping) else {}
    state["spent"] = dict(state.get("spent") or {})
    state["held"] = dict(state.get("held") or {})
    state["warned"] = list(state.get("warned") or [])
    return state


def _reserve(
    old: Any,
    now: float,
    ident: str,
    amounts: Mapping[str, Decimal],
    limits: Mapping[str, Decimal],
    ttl: float | None = None,
) -> tuple[dict[str, Any], tuple[str, Decimal] | None]:
    """Add the reservation when every unit still fits; else the unit that does not and
    what is spent and reserved in it (nothing changed). It is dropped ``ttl`` seconds
    on (:data:`RESERVATION_TTL` when ``None``) if it was never settled."""
    state = _state(old)
    held = {
        k: v
        for k, v in state["held"].items()
        if float(v["at"]) > now - float(v.get("ttl", RESERVATION_TTL))
    }
    for unit, limit in limits.items():
        used = _amount(state["spent"], unit) + sum(
            (_amount(h, unit) for h in held.values()), Decimal(0)
        )
        if used + amounts[unit] > limit:
            return state, (unit, used)
    stored = {unit: str(amount) for unit, amount in amounts.items()}
    held[ident] = {"at": now, **stored} if ttl is None else {"at": now, "ttl": ttl, **stored}
    state["held"] = held
    return state, None


def _settle(
    old: Any,
    ident: str,
    charge: Mapping[str, Decimal],
    limits: Mapping[str, Decimal],
    warn_at: float | None,
) -> tuple[dict[str, Any], list[BudgetWarning]]:
    state = _state(old)
    state["held"].pop(ident, None)
    warnings: list[BudgetWarning] = []
    for unit, amount in charge.items():
        spent = _amount(state["spent"], unit) + amount
        state["spent"][unit] = str(spent)
        fraction = float(spent / limits[unit])
        if warn_at is not None and fraction >= warn_at and unit not in state["warned"]:
            state["warned"].append(unit)
            limit = _figure(unit, limits[unit])
            warnings.append(BudgetWarning(unit, _figure(unit, spent), limit, fraction))
    return state, warnings


def _decimal(value: Decimal | float) -> Decimal:
    """Dollars as given, exactly as written (``0.1`` is ``Decimal("0.1")``)."""
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _amount(amounts: Mapping[str, Any], unit: str) -> Decimal:
    """A stored amount (a decimal string; a number in a store written before)."""
    return Decimal(str(amounts.get(unit, 0)))


def _figure(unit: str, amount: Decimal) -> Figure:
    """An amount as users read it: ``Decimal`` dollars, ``int`` tokens."""
    return amount if unit == "usd" else int(amount)


def _shown(unit: str, amount: Decimal) -> str:
    return f"${amount:.6f}" if unit == "usd" else f"{amount:.0f} tokens"
