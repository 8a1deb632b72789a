"""The price of a turn in US dollars, from genai-prices' data and the turn's exact usage.

The prices are not ours: `genai-prices` keeps them (by provider, model and date,
cache reads and writes and reasoning included). This module only maps cuca's usage
split onto its units and its provider names. A provider or model it does not know
gives ``None``, never a guess. genai-prices is imported on the first price asked for,
so ``import cuca`` does not load the price data. Importing this module installs
:func:`response_cost` as what :attr:`UnifiedResponse.cost` asks.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from .types import (
    DERIVED,
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

PRICED_PROVIDERS: dict[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "google_gemini": "google",
    "deepseek": "deepseek",
}
"""cuca endpoint kind -> genai-prices provider id. Self-hosted servers (llama.cpp, vLLM,
LM Studio, the local engine) and custom gateways have no price list."""


BATCH_RATES: dict[str, Decimal] = {
    "openai": Decimal("0.5"),
    "anthropic": Decimal("0.5"),
    "google_gemini": Decimal("0.5"),
}
"""cuca endpoint kind -> the fraction of the list price a batch job's requests cost:
half, on each vendor's pricing page (OpenAI's Batch API, Anthropic's Message Batches,
Gemini's batch mode: "50% of the standard cost"). A batch turn is priced with
genai-prices' own batch prices where it lists them (its ``processing: batch``
variants), else at this fraction of the list price."""


def batch_rate(provider: ProviderEndpoint) -> float:
    """The fraction of the list price ``provider`` bills a batch's requests at (1 for a
    provider without batches)."""
    return float(BATCH_RATES.get(provider.kind, Decimal(1)))


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
    provider_id = PRICED_PROVIDERS.get(provider.kind)
    if provider_id is None or usage is None:
        return None
    from genai_prices import Usage, calc_price

    counts = Usage(
        input_tokens=usage.prompt_tokens,
        cache_read_tokens=cache.read_tokens if cache else None,
        cache_write_tokens=cache.write_tokens if cache else None,
        output_tokens=usage.completion_tokens,
        output_reasoning_tokens=usage.reasoning_tokens,
    )
    try:
        price = calc_price(counts, model, provider_id=provider_id, genai_request_timestamp=at)
        if not batch:
            return price.total_price
        batched = calc_price(
            counts,
            model,
            provider_id=provider_id,
            genai_request_timestamp=at,
            price_context={"processing": "batch"},
        )
    except LookupError:  # a model genai-prices has no price for
        return None
    except ValueError:  # inconsistent counts (a cache read larger than the prompt)
        return None
    if batched.total_price != price.total_price:  # genai-prices lists the batch prices
        return batched.total_price
    return price.total_price * BATCH_RATES.get(provider.kind, Decimal(1))


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


DERIVED.price = response_cost
