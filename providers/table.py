"""The one table of built-in endpoints: what each one is, and where its code lives.

The registry reads it to find an endpoint's adapter and configuration type, the
``cuca`` command to name providers and find their keys and default models, and a test
checks that the docs list the same providers. Adapters are named by import path, so
reading the table imports no adapter.

Adding an OpenAI-compatible server is one entry here, with its ``chat`` dialect (what it
does differently, :class:`ChatDialect`), and its docs page: the ``/chat/completions``
adapter builds itself from the entry. The endpoint itself is a constant of
:class:`~cuca.types.ProviderEndpoint` (``ProviderEndpoint.NAME``, and its kind in
``BUILTIN`` for ``parse``): a data type imports nothing above it, so the table declares
nothing into it at import; a test checks that the table has one row per constant.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

import attrs

from cuca.types import ProviderEndpoint

__all__ = [
    "ALIASES",
    "CHAT_ADAPTER",
    "ENDPOINTS",
    "ChatDialect",
    "EndpointInfo",
    "by_cli_name",
    "endpoint_info",
    "env_base_url",
    "env_key",
    "import_path",
    "missing_key_hint",
]

CHAT_ADAPTER = "cuca.providers.chat.family:make_chat"
"""The factory of every entry with a ``chat`` dialect: the ``/chat/completions`` adapter,
or the Responses one when the entry's ``OpenAiConfig`` asks for it."""
_OPENAI_CONFIG = "cuca.providers.chat.config:OpenAiConfig"


class ChatDialect(TypedDict, total=False):
    """What an OpenAI-compatible server does differently (each key has a default; see
    :class:`cuca.providers.chat.encode.Dialect` for what each means)."""

    thinking: Literal["effort", "mode"]
    max_tokens_field: str
    echo_reasoning: Literal["always", "tool_turns"]
    key_host: str
    structured: Literal["json_schema", "json_object"]
    closes_after_stream: bool
    max_stop: int
    seed: bool
    named_tool_choice: bool


@attrs.frozen
class EndpointInfo:
    """One built-in endpoint.

    ``kind`` is ``ProviderEndpoint.kind``; ``cli_name`` what ``cuca chat --provider``
    takes; ``adapter`` the ``"module:factory"`` that builds its adapter (``None`` for the
    in-process engine); ``config`` the ``"module:Class"`` of each ``provider_config``
    type it takes (none: it takes none); ``key_env`` the variables its key is read from
    when none is given, first set wins (the vendor SDK's own names; the client and the
    command both read this list); ``base_url_env`` likewise for the base URL, where the
    vendor's SDK reads one; ``key_always`` whether it refuses to send without a key
    whatever the URL (the others need one only at the vendor's own host);
    ``default_model`` the command's default; ``docs`` its page under ``docs/providers/``;
    ``chat`` the dialect of an OpenAI-compatible server served by the generic
    ``/chat/completions`` adapter (:data:`CHAT_ADAPTER`).
    """

    kind: str
    cli_name: str
    label: str
    wire: str
    adapter: str | None
    base_url: str | None = None
    config: tuple[str, ...] = ()
    key_env: tuple[str, ...] = ()
    base_url_env: tuple[str, ...] = ()
    key_always: bool = False
    default_model: str | None = None
    docs: str | None = None
    chat: ChatDialect | None = attrs.field(default=None, eq=False, hash=False)


def chat_server(
    kind: str,
    label: str,
    base_url: str,
    dialect: ChatDialect | None = None,
    *,
    key_env: tuple[str, ...] = (),
    base_url_env: tuple[str, ...] = (),
    default_model: str | None = None,
) -> EndpointInfo:
    """The entry of an OpenAI-compatible server: the ``/chat/completions`` adapter in
    ``dialect`` (every default when ``None``), taking an ``OpenAiConfig``, its command
    name ``kind``, its docs page ``docs/providers/<kind with dashes>.md``."""
    return EndpointInfo(
        kind,
        kind,
        label,
        "/chat/completions",
        CHAT_ADAPTER,
        base_url=base_url,
        config=(_OPENAI_CONFIG,),
        key_env=key_env,
        base_url_env=base_url_env,
        default_model=default_model,
        docs=f"{kind.replace('_', '-')}.md",
        chat=dialect or {},
    )


ENDPOINTS: tuple[EndpointInfo, ...] = (
    chat_server(
        "openai",
        "OpenAI",
        "https://api.openai.com/v1",
        {
            "max_tokens_field": "max_completion_tokens",
            "key_host": "api.openai.com",
            "max_stop": 4,  # "Up to 4 sequences" (the API reference)
        },
        key_env=("OPENAI_API_KEY",),
        base_url_env=("OPENAI_BASE_URL",),
        default_model="gpt-4o-mini",
    ),
    EndpointInfo(
        "anthropic",
        "anthropic",
        "Anthropic",
        "/messages",
        "cuca.providers.anthropic.encode:make_anthropic",
        base_url="https://api.anthropic.com/v1",
        config=("cuca.providers.anthropic.encode:AnthropicConfig",),
        key_env=("ANTHROPIC_API_KEY",),
        base_url_env=("ANTHROPIC_BASE_URL",),
        key_always=True,
        default_model="claude-sonnet-4-5",
        docs="anthropic.md",
    ),
    EndpointInfo(
        "google_gemini",
        "gemini",
        "Gemini",
        "streamGenerateContent",
        "cuca.providers.gemini.encode:make_gemini",
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
        "cuca.providers.chat.deepseek:make_deepseek",
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
        "cuca.providers.llamacpp.encode:make_llama_cpp",
        base_url="http://127.0.0.1:8080",
        config=("cuca.providers.llamacpp.encode:LlamaCppConfig", _OPENAI_CONFIG),
        default_model="default",  # llama-server serves the model it was started with
        docs="llama-cpp.md",
    ),
    chat_server("vllm", "vLLM", "http://127.0.0.1:8000/v1"),
    chat_server(
        "lm_studio",
        "LM Studio",
        "http://127.0.0.1:1234/v1",
        {"named_tool_choice": False},  # tool_choice: "auto", "none" or "required"
    ),
    EndpointInfo("local", "local", "a GGUF model in process", "none", None),
)
"""Every built-in endpoint, in the order the docs and the command list them."""

ALIASES: Mapping[str, str] = ProviderEndpoint.ALIASES
"""Other spellings the command accepts (besides each ``cli_name``): the types' own."""

_Index = tuple[tuple[EndpointInfo, ...], dict[str, EndpointInfo], dict[str, EndpointInfo]]
_index: _Index | None = None


def _lookup() -> _Index:
    """``ENDPOINTS`` by kind and by every accepted name (rebuilt if the table changed)."""
    global _index
    if _index is None or _index[0] is not ENDPOINTS:
        by_kind = {info.kind: info for info in ENDPOINTS}
        by_name = {
            **by_kind,
            **{info.cli_name: info for info in ENDPOINTS},
            **{alias: by_kind[kind] for alias, kind in ALIASES.items()},
        }
        _index = (ENDPOINTS, by_kind, by_name)
    return _index


def endpoint_info(kind: str) -> EndpointInfo | None:
    """The entry of the endpoint ``kind`` (``ProviderEndpoint.kind``), if built in."""
    return _lookup()[1].get(kind)


def _first_set(names: tuple[str, ...], env: Mapping[str, str] | None) -> str | None:
    """The value of the first of ``names`` set in ``env`` (an empty value is unset)."""
    values = os.environ if env is None else env
    for name in names:
        if value := values.get(name, "").strip():
            return value
    return None


def env_key(kind: str, env: Mapping[str, str] | None = None) -> str | None:
    """The key of endpoint ``kind`` from the vendor's own variable (``OPENAI_API_KEY``,
    ``GEMINI_API_KEY`` then ``GOOGLE_API_KEY``...) in ``env`` (the process environment
    when ``None``); ``None`` when none is set or the endpoint declares none."""
    info = endpoint_info(kind)
    return None if info is None else _first_set(info.key_env, env)


def env_base_url(kind: str, env: Mapping[str, str] | None = None) -> str | None:
    """The base URL of endpoint ``kind`` from the variable its vendor's SDK reads
    (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``), if set."""
    info = endpoint_info(kind)
    return None if info is None else _first_set(info.base_url_env, env)


def missing_key_hint(kind: str) -> str:
    """What to do about a missing key, naming the variables: ``"pass api_key= or set
    OPENAI_API_KEY"`` (just ``"pass api_key="`` for an endpoint that declares none)."""
    info = endpoint_info(kind)
    names = () if info is None else info.key_env
    return "pass api_key=" + (f" or set {' or '.join(names)}" if names else "")


def import_path(target: str) -> Any:
    """The object named ``"module:name"``."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def by_cli_name(name: str) -> EndpointInfo | None:
    """The entry named ``name`` in any accepted spelling (``gemini``, ``google-gemini``,
    ``llamacpp``...), case-insensitive."""
    return _lookup()[2].get(name.strip().lower().replace("-", "_"))
