"""The price of a turn in US dollars, from genai-prices' data and the turn's exact usage.

The prices are not ours: `genai-prices` keeps them (by provider, model and date,
cache reads and writes and reasoning included). This module only maps cuca's usage
split onto its units and its provider names. A provider or model it does not know
gives ``None``, never a guess. genai-prices is imported on the first price asked for,
so ``import cuca`` does not load the price data.
The price function itself, over plain counts, is :func:`cuca._prices.price` (a floor below
the data types, which :attr:`UnifiedResponse.cost` calls).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from ._prices import BATCH_RATES, PRICED_PROVIDERS, price
from .types import (
    ModelInfo,
    PromptCacheUsage,
    ProviderEndpoint,
    TokenUsage,
    UnifiedResponse,
)

__all__ = [
    "BATCH_RATES",
    "PRICED_PROVIDERS",
    "batch_rate",
    "model_window",
    "response_cost",
    "turn_cost",
]


def batch_rate(provider: ProviderEndpoint) -> Decimal:
    """The fraction of the list price ``provider`` bills a batch's requests at (1 for a
    provider without batches), exact: money is never a float."""
    return BATCH_RATES.get(provider.kind, Decimal(1))


def turn_cost(
    provider: ProviderEndpoint,
    model: str,
    usage: TokenUsage | None,
    cache: PromptCacheUsage | None = None,
    *,
    at: datetime | None = None,
    batch: bool = False,
) -> Decimal | None:
    """What a turn with this usage cost on ``provider`` for ``model``, at time ``at``
    (now by default: some prices depend on the date or the hour), or ``None`` when the
    provider, the model or the usage is unknown.

    cuca's counts and genai-prices' units nest the same way: ``prompt_tokens`` holds
    the cache reads and writes, ``completion_tokens`` holds the reasoning tokens; each
    part is billed at its own rate. ``batch``: the turn ran in a batch job, billed at
    the vendor's batch prices (genai-prices' ``processing: batch`` variant where it has
    one, else :data:`BATCH_RATES` of the list price).
    """
    if usage is None:
        return None
    return price(
        provider.kind,
        model,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.reasoning_tokens,
        cache.read_tokens if cache else None,
        cache.write_tokens if cache else None,
        at=at,
        batch=batch,
    )


def model_window(provider: ProviderEndpoint, model: str) -> ModelInfo:
    """``model``'s window on ``provider`` from genai-prices' model data (its
    ``context_window``), with ``None`` figures for a provider or model it does not know.
    genai-prices keeps no output limit, so ``max_output_tokens`` stays ``None``."""
    provider_id = PRICED_PROVIDERS.get(provider.kind)
    if provider_id is None:
        return ModelInfo(model=model)
    from genai_prices.data_snapshot import get_snapshot

    try:
        _, found = get_snapshot().find_provider_model(model, None, provider_id, None)
    except LookupError:
        return ModelInfo(model=model)
    return ModelInfo(model=model, context_window=found.context_window, source="genai-prices")


def response_cost(response: UnifiedResponse, when: datetime | None) -> Decimal | None:
    """What ``response``'s turn cost at the prices in force at ``when`` (now if ``None``)."""
    return turn_cost(
        response.provider,
        response.model,
        response.usage,
        response.prompt_cache_usage,
        at=when,
        batch=response.batch,
    )
