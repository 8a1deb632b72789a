"""The one table of built-in endpoints: what each one is, and where its code lives.

The registry reads it to find an endpoint's adapter and configuration type, the
``cuca`` command to name providers and find their keys and default models, and a test
checks that the docs list the same providers. Adapters are named by import path, so
reading the table imports no adapter. Adding an OpenAI-compatible server is one entry
here (with a ``make_*`` factory in :mod:`cuca.providers.openai_compat`) and its docs page.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["ALIASES", "ENDPOINTS", "EndpointInfo", "by_cli_name", "endpoint_info", "import_path"]


@attrs.frozen
class EndpointInfo:
    """One built-in endpoint.

    ``kind`` is ``ProviderEndpoint.kind``; ``cli_name`` what ``cuca chat --provider``
    takes; ``adapter`` the ``"module:factory"`` that builds its adapter (``None`` for the
    in-process engine); ``config`` the ``"module:Class"`` of each ``provider_config``
    type it takes (none: it takes none); ``key_env`` the variables the command reads its key
    from, first set wins; ``key_always`` whether it refuses to send without a key
    whatever the URL (the others need one only at the vendor's own host);
    ``default_model`` the command's default; ``docs`` its page under ``docs/providers/``.
    """

    kind: str
    cli_name: str
    label: str
    wire: str
    adapter: str | None
    base_url: str | None = None
    config: tuple[str, ...] = ()
    key_env: tuple[str, ...] = ()
    key_always: bool = False
    default_model: str | None = None
    docs: str | None = None


_COMPAT = "cuca.providers.openai_compat"
_OPENAI_CONFIG = "cuca.providers.openai_config:OpenAiConfig"

ENDPOINTS: tuple[EndpointInfo, ...] = (
    EndpointInfo(
        "openai",
        "openai",
        "OpenAI",
        "/chat/completions",
        f"{_COMPAT}:make_openai",
        base_url="https://api.openai.com/v1",
        config=(_OPENAI_CONFIG,),
        key_env=("OPENAI_API_KEY",),
        default_model="gpt-4o-mini",
        docs="openai.md",
    ),
    EndpointInfo(
        "anthropic",
        "anthropic",
        "Anthropic",
        "/messages",
        "cuca.providers.anthropic:make_anthropic",
        base_url="https://api.anthropic.com/v1",
        config=("cuca.providers.anthropic:AnthropicConfig",),
        key_env=("ANTHROPIC_API_KEY",),
        key_always=True,
        default_model="claude-sonnet-4-5",
        docs="anthropic.md",
    ),
    EndpointInfo(
        "google_gemini",
        "gemini",
        "Gemini",
        "streamGenerateContent",
        "cuca.providers.gemini:make_gemini",
        base_url="https://generativelanguage.googleapis.com",
        key_env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        key_always=True,
        default_model="gemini-2.5-flash",
        docs="gemini.md",
    ),
    EndpointInfo(
        "deepseek",
        "deepseek",
        "DeepSeek",
        "/chat/completions, or /messages under /anthropic",
        "cuca.providers.deepseek:make_deepseek",
        base_url="https://api.deepseek.com/v1",
        key_env=("DEEPSEEK_API_KEY",),
        default_model="deepseek-chat",
        docs="deepseek.md",
    ),
    EndpointInfo(
        "llama_cpp",
        "llama_cpp",
        "llama.cpp (llama-server)",
        "/v1/chat/completions, or /completion",
        "cuca.providers.llamacpp:make_llama_cpp",
        base_url="http://127.0.0.1:8080",
        config=("cuca.providers.llamacpp:LlamaCppConfig", _OPENAI_CONFIG),
        default_model="default",  # llama-server serves the model it was started with
        docs="llama-cpp.md",
    ),
    EndpointInfo(
        "vllm",
        "vllm",
        "vLLM",
        "/chat/completions",
        f"{_COMPAT}:make_vllm",
        base_url="http://127.0.0.1:8000/v1",
        config=(_OPENAI_CONFIG,),
        docs="vllm.md",
    ),
    EndpointInfo(
        "lm_studio",
        "lm_studio",
        "LM Studio",
        "/chat/completions",
        f"{_COMPAT}:make_lm_studio",
        base_url="http://127.0.0.1:1234/v1",
        config=(_OPENAI_CONFIG,),
        docs="lm-studio.md",
    ),
    EndpointInfo("local", "local", "a GGUF model in process", "none", None),
)
"""Every built-in endpoint, in the order the docs and the command list them."""

ALIASES: Mapping[str, str] = {"llamacpp": "llama_cpp", "lmstudio": "lm_studio"}
"""Other spellings ``ProviderEndpoint.parse`` accepts (besides each ``cli_name``)."""

_BY_KIND = {info.kind: info for info in ENDPOINTS}
_BY_NAME = {
    **{info.kind: info for info in ENDPOINTS},
    **{info.cli_name: info for info in ENDPOINTS},
    **{alias: _BY_KIND[kind] for alias, kind in ALIASES.items()},
}


def endpoint_info(kind: str) -> EndpointInfo | None:
    """The entry of the endpoint ``kind`` (``ProviderEndpoint.kind``), if built in."""
    return _BY_KIND.get(kind)


def import_path(target: str) -> Any:
    """The object named ``"module:name"``."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def by_cli_name(name: str) -> EndpointInfo | None:
    """The entry named ``name`` in any accepted spelling (``gemini``, ``google-gemini``,
    ``llamacpp``...), case-insensitive."""
    return _BY_NAME.get(name.strip().lower().replace("-", "_"))
