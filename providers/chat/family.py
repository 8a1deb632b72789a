"""The adapter of an OpenAI-compatible server from the provider table: the
``/chat/completions`` one, or the Responses one when its ``OpenAiConfig`` asks for it.

The table's ``CHAT_ADAPTER`` names :func:`make_chat`; it sits above both adapters so
that neither imports the other (the Responses adapter extends the chat one).
"""

from __future__ import annotations

from ..base import ClientSettings, ProviderAdapter
from .config import wants_responses
from .encode import Dialect, OpenAiCompatAdapter, dialect_of

__all__ = ["make_chat"]


def _adapter(dialect: Dialect, settings: ClientSettings) -> ProviderAdapter:
    """The chat adapter, or the Responses one when ``OpenAiConfig`` asks for it."""
    base = settings.url()
    if wants_responses(settings.provider_config, dialect.name):
        from ..responses.encode import ResponsesAdapter

        return ResponsesAdapter(dialect, base, settings.api_key)
    return OpenAiCompatAdapter(dialect, base, settings.api_key)


def make_chat(settings: ClientSettings) -> ProviderAdapter:
    """The adapter of any OpenAI-compatible server of the provider table (OpenAI, vLLM,
    LM Studio...), in the dialect its entry gives, at its default URL or ``base_url``."""
    return _adapter(dialect_of(settings.provider), settings)
