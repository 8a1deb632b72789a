"""Which OpenAI API an OpenAI-compatible client speaks: Chat Completions or Responses.

OpenAI, vLLM, LM Studio and llama.cpp's ``llama-server`` all serve both
``/chat/completions`` and ``/responses``; the unified request and stream are the same
either way, only the wire differs.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from cuca.errors import ConfigurationError

__all__ = ["OpenAiApi", "OpenAiConfig", "wants_responses"]


class OpenAiApi(enum.Enum):
    """The OpenAI API a client posts to."""

    CHAT = "chat"
    """``POST /v1/chat/completions`` (the default)."""
    RESPONSES = "responses"
    """``POST /v1/responses``: typed output items, reasoning summaries and encrypted
    reasoning that round-trips without server-side state."""


@attrs.frozen
class OpenAiConfig:
    """The ``provider_config`` of the OpenAI, vLLM and LM Studio endpoints (llama.cpp
    takes it too, or :class:`~cuca.LlamaCppConfig` with ``route=LlamaRoute.RESPONSES``).
    """

    api: OpenAiApi = OpenAiApi.CHAT


def wants_responses(config: Any, provider: str) -> bool:
    """Whether ``config`` (a client's ``provider_config``) selects the Responses API;
    any other kind of config is a ``ConfigurationError`` naming the provider."""
    if config is None:
        return False
    if not isinstance(config, OpenAiConfig):
        raise ConfigurationError(f"{provider} takes an OpenAiConfig, not {type(config).__name__}")
    return config.api is OpenAiApi.RESPONSES
