"""What ``cuca serve`` serves: model names mapped to backends, from the command line or
from a ``serve.toml`` file.

A file names each served model under ``[models."NAME"]``::

    [server]
    host = "127.0.0.1"
    port = 8080

    [keys]                           # each client key's own gates
    rate_limit = { requests_per_minute = 30 }
    budget = { tokens = 1000000, window = 86400 }
    store = "redis://10.0.0.5:6379/0"  # shared by the replicas (default: this process)

    [models."smollm2"]
    provider = "local"               # the in-process engine
    path = "~/models/SmolLM2-135M-Instruct-Q8_0.gguf"
    ctx = 4096
    parallel = 4                     # conversations decoded together
    fast = false                     # true: flash attention, reuse not bit-exact
    chat_template_file = "think.jinja"

    [models."gpt-4o-mini"]
    provider = "openai"              # a gateway: any cuca provider
    model = "gpt-4o-mini"            # the name sent upstream (default: NAME)
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"   # default: the vendor's usual variable
    timeout = 60
    retries = 2
    session_log = "turns.sqlite"     # every turn in a SessionLog
    rate_limit = { requests_per_minute = 60, max_concurrent = 4 }   # a RateLimiter
    budget = { usd = 5.0, window = 86400 }                           # a Budget
    cache = { ttl = 3600 }                                           # a ResponseCache
    compaction = { budget = 100000, headroom = 0.25 }                # a Compactor
    fallback = ["local-backup"]      # routes that take a turn this one fails to start

    [models."pooled"]
    provider = "llama_cpp"
    base_url = ["http://10.0.0.1:8080", "http://10.0.0.2:8080"]     # a pool of servers
    pool = { cool_down = 10, failures = 1 }                          # its PoolPolicy

``NAME = "*"`` serves every model name not listed (a gateway passing names through).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from cuca.errors import ConfigurationError
from cuca.providers.table import env_key
from cuca.types import ProviderEndpoint

__all__ = ["BackendSpec", "ServeSpec", "load_spec"]

DEFAULT_PORT = 8080


@attrs.frozen
class BackendSpec:
    """One served model: its backend and the options of the client that reaches it
    (the same as ``cuca chat``'s)."""

    name: str
    provider: ProviderEndpoint
    model: str | None = None
    path: Path | None = None
    base_url: str | tuple[str, ...] | None = None
    """One server, or several serving the same model (a pool)."""
    api_key: str | None = attrs.field(default=None, repr=False)
    ctx: int | None = None
    threads: int | None = None
    parallel: int | None = None
    fast: bool = False
    """The engine's throughput setting: ``exact_reuse=False`` and flash attention (see
    docs/serve.md, Benchmark)."""
    chat_template_file: Path | None = None
    timeout: float | None = None
    retries: int | None = None
    features: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, hash=False)
    """The client features of this route by name (:data:`FEATURES`): each table's keys
    are the keyword arguments of its class."""
    session_log: Path | None = None
    pool: Mapping[str, Any] | None = attrs.field(default=None, hash=False)
    """The :class:`~cuca.PoolPolicy` of a pool (``base_url`` a list), as its keyword
    arguments."""
    fallback: tuple[str, ...] = ()
    """The routes (names in the same file) that take a turn this one fails before its
    first item, in order: a :class:`~cuca.FallbackClient`."""

    @property
    def is_local(self) -> bool:
        return self.provider == ProviderEndpoint.LOCAL


@attrs.frozen
class ServeSpec:
    """Everything the server needs: where to listen, its keys, and its models."""

    backends: tuple[BackendSpec, ...]
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_keys: tuple[str, ...] = attrs.field(default=(), repr=False)
    allow_open: bool = False
    keys: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    """The ``[keys]`` table: each key's ``rate_limit`` and ``budget``, and the ``store``
    they are kept in (see :func:`key_limits`)."""

    def secrets(self) -> tuple[str, ...]:
        """The upstream keys, never to be sent back."""
        return tuple(b.api_key for b in self.backends if b.api_key)


def _of(table: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    """``table[key]`` if it is a ``kind`` (an integer for a float too), ``None`` when
    absent; anything else is a ConfigurationError naming it."""
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool:
        raise ConfigurationError(f"{where}.{key} must be {kind.__name__}, not {value!r}")
    if kind is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, kind):
        raise ConfigurationError(f"{where}.{key} must be {kind.__name__}, not {value!r}")
    return value


_LOCAL_OPTIONS = ("path", "ctx", "threads", "parallel", "fast", "chat_template_file")
"""A route's keys that only the local engine reads: refused on a gateway's route."""


def _backend(name: str, table: Any, env: Mapping[str, str], base: Path) -> BackendSpec:
    where = f"models.{name}"
    if not isinstance(table, dict):
        raise ConfigurationError(f"{where} must be a table")
    provider = ProviderEndpoint.parse(_of(table, "provider", str, where) or "local")
    path = _of(table, "path", str, where)
    template = _of(table, "chat_template_file", str, where)
    key = None
    if provider != ProviderEndpoint.LOCAL:
        for option in _LOCAL_OPTIONS:
            if table.get(option) is not None:
                raise ConfigurationError(
                    f"{where}.{option} is for the local engine, not a {provider.kind} gateway"
                )
        variable = _of(table, "api_key_env", str, where)
        key = env.get(variable) if variable else env_key(provider.kind, env)
    elif path is None:
        from cuca.engine import default_model_path

        path = str(default_model_path())
    return BackendSpec(
        name=name,
        provider=provider,
        model=_of(table, "model", str, where),
        path=(base / Path(path).expanduser()) if path else None,
        base_url=_base_url(table, where),
        api_key=key or None,
        ctx=_of(table, "ctx", int, where),
        threads=_of(table, "threads", int, where),
        parallel=_of(table, "parallel", int, where),
        fast=bool(_of(table, "fast", bool, where)),
        chat_template_file=(base / Path(template).expanduser()) if template else None,
        timeout=_of(table, "timeout", float, where),
        retries=_of(table, "retries", int, where),
        features=_features(table, where),
        session_log=(base / Path(log).expanduser())
        if (log := _of(table, "session_log", str, where))
        else None,
        pool=_table(table, "pool", where),
        fallback=_names(table, "fallback", where),
    )


def _base_url(table: Mapping[str, Any], where: str) -> str | tuple[str, ...] | None:
    value = table.get("base_url")
    if isinstance(value, list):
        if not value or not all(isinstance(url, str) for url in value):
            raise ConfigurationError(f"{where}.base_url must be a URL or a list of URLs")
        return tuple(value)
    url: str | None = _of(table, "base_url", str, where)
    return url


def _table(table: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
    value = table.get(key)
    if value is not None and not isinstance(value, dict):
        raise ConfigurationError(f"{where}.{key} must be a table of its settings")
    return value


def _names(table: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ConfigurationError(f"{where}.{key} must be a list of model names")
    return tuple(value)


FEATURES = ("rate_limit", "budget", "cache", "compaction")
"""The client features a route may have, each a table of its class's keyword arguments
(:class:`~cuca.RateLimiter`, :class:`~cuca.Budget`, :class:`~cuca.ResponseCache`,
:class:`~cuca.Compactor`)."""


def _features(table: Mapping[str, Any], where: str) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    for name in FEATURES:
        value = _table(table, name, where)
        if value is not None:
            found[name] = value
    return found


def _check_fallbacks(backends: tuple[BackendSpec, ...]) -> None:
    """Each fallback names another route of the file (not ``*``, which has no one
    name to send)."""
    names = {b.name for b in backends}
    for backend in backends:
        for name in backend.fallback:
            if name == backend.name or name == "*" or name not in names:
                raise ConfigurationError(
                    f"models.{backend.name}.fallback: {name!r} is not another model of the file"
                )


def load_spec(path: Path, env: Mapping[str, str]) -> ServeSpec:
    """The spec a ``serve.toml`` file describes (relative paths from its folder)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from None
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise ConfigurationError(f'{path} names no [models."NAME"] table')
    base = path.parent
    backends = tuple(_backend(n, t, env, base) for n, t in models.items())
    _check_fallbacks(backends)
    server = data.get("server", {})
    if not isinstance(server, dict):
        raise ConfigurationError(f"{path}: [server] must be a table")
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        raise ConfigurationError(f"{path}: [keys] must be a table")
    unknown = set(keys) - {"rate_limit", "budget", "store"}
    if unknown:
        raise ConfigurationError(f"[keys] has no {', '.join(sorted(unknown))}")
    for name in ("rate_limit", "budget"):
        _table(keys, name, "keys")
    _of(keys, "store", str, "keys")
    return ServeSpec(
        backends,
        host=_of(server, "host", str, "server") or "127.0.0.1",
        port=_of(server, "port", int, "server") or DEFAULT_PORT,
        keys=keys,
    )
