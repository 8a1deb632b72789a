"""UnifiedResponse.cost: a real turn per provider over loopback, priced by cuca from its own
usage split, against genai-prices' own reading of the vendor's usage JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import genai_prices
import pytest
from support.transcripts import transcript

from cuca import (
    CucaClient,
    PromptCacheUsage,
    ProviderEndpoint,
    TokenUsage,
    UnifiedRequest,
    UnifiedResponse,
)
from cuca.cli.render import usage_line
from cuca.testing import Reply, open_replay_server

WHEN = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # DeepSeek prices depend on the hour

# provider, transcript, model, base-url suffix, genai-prices provider id and API flavour
E = ProviderEndpoint
CASES = [
    (E.OPENAI, "openai/text", "gpt-4o", "/v1", "openai", "chat"),
    (E.ANTHROPIC, "anthropic/cache_usage", "claude-sonnet-4-20250514", "", "anthropic", "default"),
    (E.DEEPSEEK, "deepseek/tool_call", "deepseek-chat", "/v1", "deepseek", "chat"),
    (E.DEEPSEEK, "deepseek/reasoner", "deepseek-reasoner", "/v1", "deepseek", "chat"),
    (E.GOOGLE_GEMINI, "gemini/usage_only_final", "gemini-2.5-flash", "", "google", "default"),
]


def vendor_usage(body: bytes) -> dict[str, Any]:
    """The last usage object the vendor sent, in the vendor's own JSON, as a response body
    that genai-prices' extractors read."""
    found: dict[str, Any] = {}
    for line in body.decode().splitlines():
        if not line.startswith("data:") or line.strip() == "data: [DONE]":
            continue
        frame = json.loads(line[5:])
        if frame.get("usageMetadata"):
            found = {"usageMetadata": frame["usageMetadata"]}
        elif frame.get("usage"):
            found = {"usage": frame["usage"]}
    return found


async def priced_turn(
    provider: ProviderEndpoint, name: str, model: str, suffix: str
) -> UnifiedResponse:
    request = UnifiedRequest.new(model).add_user_message("hi")
    async with open_replay_server(Reply(transcript(name))) as server:
        async with CucaClient(provider, base_url=server.url + suffix, api_key="k") as client:
            done = await client.generate(request)
    return done.response


@pytest.mark.parametrize(("provider", "name", "model", "suffix", "price_id", "flavor"), CASES)
async def test_cost_matches_genai_prices_on_the_vendor_usage(
    provider: ProviderEndpoint, name: str, model: str, suffix: str, price_id: str, flavor: str
) -> None:
    response = await priced_turn(provider, name, model, suffix)
    vendor = vendor_usage(transcript(name))
    extracted = genai_prices.extract_usage(
        {"model": model, "modelVersion": model, **vendor}, provider_id=price_id, api_flavor=flavor
    )
    expected = extracted.calc_price(genai_request_timestamp=WHEN).total_price
    assert response.cost_at(WHEN) == expected
    assert isinstance(response.cost, Decimal)
    assert f"${response.cost:f}" in usage_line(response, None)


async def test_cost_bills_cache_reads_writes_and_reasoning_at_their_own_rates() -> None:
    """Not the peers' mistakes: cached tokens are not billed as fresh input, and the
    reasoning tokens are billed (as output)."""
    response = await priced_turn(
        ProviderEndpoint.ANTHROPIC, "anthropic/cache_usage", "claude-sonnet-4-20250514", ""
    )
    assert response.prompt_cache_usage == PromptCacheUsage(1843, 190)
    assert response.usage is not None
    uncached = UnifiedResponse(response.provider, response.model, response.usage)
    cost, full = response.cost_at(WHEN), uncached.cost_at(WHEN)
    assert cost is not None and full is not None
    # 1843 reads at a tenth of the input rate, 190 writes at 1.25 times it
    rate = Decimal(3) / 10**6
    assert full - cost == 1843 * rate * Decimal("0.9") - 190 * rate * Decimal("0.25")

    reasoner = await priced_turn(
        ProviderEndpoint.DEEPSEEK, "deepseek/reasoner", "deepseek-reasoner", "/v1"
    )
    assert reasoner.usage == TokenUsage(10, 128, 94)
    no_output = UnifiedResponse(reasoner.provider, reasoner.model, TokenUsage(10, 0, 0))
    assert (reasoner.cost_at(WHEN) or 0) > (no_output.cost_at(WHEN) or 0)


@pytest.mark.parametrize(
    ("provider", "model", "usage"),
    [
        (ProviderEndpoint.OPENAI, "no-such-model-7", TokenUsage(10, 5)),
        (ProviderEndpoint.VLLM, "gpt-4o", TokenUsage(10, 5)),
        (ProviderEndpoint.LOCAL, "gpt-4o", TokenUsage(10, 5)),
        (ProviderEndpoint.custom("gateway"), "gpt-4o", TokenUsage(10, 5)),
        (ProviderEndpoint.OPENAI, "gpt-4o", None),
    ],
)
def test_cost_is_none_when_the_price_is_unknown(
    provider: ProviderEndpoint, model: str, usage: TokenUsage | None
) -> None:
    """An unknown model, a self-hosted server, a custom gateway or a turn without usage:
    no price, never a guess; the usage line then shows no cost."""
    response = UnifiedResponse(provider, model, usage)
    assert response.cost is None
    assert "$" not in usage_line(response, None)


def test_cost_is_none_for_inconsistent_counts() -> None:
    """More cache reads than prompt tokens cannot be priced: ``None``, not an exception."""
    response = UnifiedResponse(
        ProviderEndpoint.OPENAI, "gpt-4o", TokenUsage(10, 5), PromptCacheUsage(read_tokens=50)
    )
    assert response.cost is None
