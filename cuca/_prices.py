"""Prices from genai-prices' data: a function of plain counts, on a floor below the data
types, so that :attr:`cuca.types.UnifiedResponse.cost` computes its own price without
importing anything above it (and nothing needs to install a price function at import).

genai-prices is imported on the first price asked for, so ``import cuca`` does not load
the price data. :mod:`cuca.cost` is the public face (:func:`~cuca.cost.turn_cost` over
cuca's types, model windows).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

__all__ = ["BATCH_RATES", "PRICED_PROVIDERS", "price"]

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


def price(
    kind: str,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    reasoning_tokens: int | None = None,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
    *,
    at: datetime | None = None,
    batch: bool = False,
) -> Decimal | None:
    """What a turn with these counts cost on the endpoint ``kind`` for ``model`` at
    ``at`` (now when ``None``), or ``None`` for a provider or model genai-prices does not
    price. The counts nest as cuca's do (the prompt holds the cache reads and writes, the
    completion holds the reasoning); ``batch`` prices a batch job's request (see
    :data:`BATCH_RATES`)."""
    provider_id = PRICED_PROVIDERS.get(kind)
    if provider_id is None:
        return None
    from genai_prices import Usage, calc_price

    counts = Usage(
        input_tokens=prompt_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
        output_tokens=completion_tokens,
        output_reasoning_tokens=reasoning_tokens,
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
    return price.total_price * BATCH_RATES.get(kind, Decimal(1))
