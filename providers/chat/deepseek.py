"""DeepSeek: the native ``/chat/completions`` route, or the Anthropic-compatible bridge.

The native route is the OpenAI-compatible adapter with DeepSeek's quirks (see
``reference/wire.md`` section 4):

- Thinking is a mode, ``{"thinking": {"type": "enabled" | "disabled"}}``; there is no
  effort level to send, so the unified effort is dropped.
- Reasoning is sent back as ``reasoning_content`` on assistant turns that called tools,
  which thinking mode requires; on other turns the API ignores it, and the legacy
  ``deepseek-reasoner`` rejected it, so it is left out there.
- Usage rides on the finish chunk, with ``prompt_cache_hit_tokens``; the shared decoder
  reads both.
- Structured output is JSON mode only (``response_format: {"type": "json_object"}``): the
  schema goes into a system message, and nothing on the server enforces it.

A base URL ending in ``/anthropic`` selects the bridge, which speaks Anthropic Messages.
"""

from __future__ import annotations

from cuca.types import ProviderEndpoint

from ..base import ClientSettings, ProviderAdapter
from .encode import Dialect, OpenAiCompatAdapter

__all__ = ["DEEPSEEK", "is_bridge_url", "make_deepseek"]

DEEPSEEK = Dialect(
    ProviderEndpoint.DEEPSEEK,
    thinking="mode",
    echo_reasoning="tool_turns",
    key_host="api.deepseek.com",
    structured="json_object",
    max_stop=16,  # "Up to 16 sequences" (the API reference)
    seed=False,  # the API has no seed
)


def is_bridge_url(base_url: str | None) -> bool:
    """Whether ``base_url`` points at DeepSeek's Anthropic-compatible bridge."""
    if not base_url:
        return False
    trimmed = base_url.rstrip("/")
    return trimmed.endswith("/anthropic") or "api.deepseek.com/anthropic" in trimmed


def make_deepseek(settings: ClientSettings) -> ProviderAdapter:
    """The native route at ``https://api.deepseek.com/v1``, or the bridge adapter when the
    base URL names it."""
    if is_bridge_url(settings.base_url):
        from ..anthropic.encode import make_deepseek_bridge  # only bridge users load Anthropic's

        bridge: ProviderAdapter = make_deepseek_bridge(settings)
        return bridge
    base = settings.url()
    return OpenAiCompatAdapter(DEEPSEEK, base, settings.api_key)
