"""A client's settings, checked before any I/O: its timeouts, its provider and base
URLs, the key and URL a vendor's environment variables give, extra headers, the gates
and the cache among its plugins, and the event loop it runs under.

Everything here refuses what cannot work with a :class:`~cuca.errors.ConfigurationError`
that says what to write instead, when the client is built (or a turn opened), never
halfway through a turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import httpx
import sniffio

from ._checks import kind, optional, seconds
from .errors import ConfigurationError
from .types import ProviderEndpoint

if TYPE_CHECKING:
    from .admission import TurnGate, TurnReplay
    from .plugins import CucaPlugin

__all__ = [
    "Timeouts",
    "admitters",
    "check_client",
    "checked_headers",
    "from_environment",
    "require_trio",
    "timeouts",
]


@attrs.frozen
class Timeouts:
    """Optional limits, in seconds; ``None`` means no limit (the default everywhere).

    ``connect``, ``read``, ``write`` and ``pool`` are httpx's per-operation timeouts;
    ``total`` is a deadline for a whole turn, from the first byte sent to the last
    block received.
    """

    connect: float | None = attrs.field(default=None, validator=optional(seconds))
    read: float | None = attrs.field(default=None, validator=optional(seconds))
    write: float | None = attrs.field(default=None, validator=optional(seconds))
    pool: float | None = attrs.field(default=None, validator=optional(seconds))
    total: float | None = attrs.field(default=None, validator=optional(seconds))

    def httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


def timeouts(
    value: Timeouts | float | None, http_client: httpx.AsyncClient | None = None
) -> Timeouts:
    """``timeout=`` as a client takes it: :class:`Timeouts`, one number of seconds for
    every operation, or ``None`` (no limit).

    With ``http_client`` (the user's own httpx client, which cuca sends on as it is),
    only ``total`` may be set: the per-operation limits are that client's own, and
    setting them here is refused rather than left without effect (a read timeout that
    never fires on a stalled stream)."""
    if value is None:
        chosen = Timeouts()
    elif isinstance(value, Timeouts):
        chosen = value
    else:
        chosen = Timeouts(connect=value, read=value, write=value, pool=value)
    if http_client is not None and chosen.httpx() != httpx.Timeout(None):
        raise ConfigurationError(
            "timeout= sets connect, read, write and pool on cuca's own connections, not on "
            "an http_client you pass: give that client its timeouts (httpx.AsyncClient("
            "timeout=httpx.Timeout(None, read=30))); Timeouts(total=...) applies with either"
        )
    return chosen


def check_client(provider: object, base_url: object) -> None:
    """Refuse, before any I/O, a provider or base URL that cannot work."""
    if not isinstance(provider, ProviderEndpoint):
        raise ConfigurationError(
            f"provider must be a ProviderEndpoint, not {kind(provider)}: write "
            "ProviderEndpoint.OPENAI, or ProviderEndpoint.parse('openai')"
        )
    if base_url is None or base_url == "":  # empty: unset, as the seeds read it
        return
    urls = [base_url] if isinstance(base_url, str) else base_url
    if not isinstance(urls, Sequence) or not all(isinstance(url, str) for url in urls):
        raise ConfigurationError(
            f"base_url must be a string or a list of strings, not {kind(base_url)}"
        )
    if not urls:
        raise ConfigurationError("a pool needs one base URL or more, on an HTTP provider")
    for url in urls:
        if not url.lower().startswith(("http://", "https://")):
            raise ConfigurationError(
                f"base_url {url.split('@')[-1]!r} has no http:// or https:// scheme"
            )


def from_environment(
    provider: ProviderEndpoint, base_url: str | Sequence[str] | None, api_key: str | None
) -> tuple[str | Sequence[str] | None, str | None]:
    """The base URL and key not given, from the vendor's own variables (declared per
    endpoint in :mod:`cuca.providers.table`); what was given always wins, and
    ``api_key=""`` stays "no key"."""
    if base_url is not None and base_url != "" and api_key is not None:
        return base_url, api_key
    from cuca.providers.table import env_base_url, env_key

    if base_url is None or base_url == "":
        base_url = env_base_url(provider.kind) or base_url
        check_client(provider, base_url)
    if api_key is None:
        api_key = env_key(provider.kind)
    return base_url, api_key


def checked_headers(headers: object, provider: ProviderEndpoint) -> dict[str, str]:
    """Extra headers as given (``None``: none); a ``ConfigurationError`` for anything
    but a mapping of strings to strings, or for the local engine, which sends none."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in headers.items()
    ):
        raise ConfigurationError(
            "headers must be a mapping of header names to strings, not "
            f"{type(headers).__name__}"  # never the values: a header may hold a secret
        )
    if headers and provider == ProviderEndpoint.LOCAL:
        raise ConfigurationError("headers= is for HTTP providers: the local engine sends none")
    return dict(headers)


def require_trio() -> None:
    """Refuse to start a turn outside trio, with what to do instead.

    cuca is built on trio's structured concurrency (nurseries, cancel scopes, memory
    channels, ``trio.to_thread``); under another event loop trio fails deep inside with
    an ``AttributeError``. An asyncio program reaches cuca through trio-asyncio.
    """
    try:
        library: str | None = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    if library != "trio":
        raise ConfigurationError(
            f"cuca runs under trio, not {library or 'this event loop'}: start the program "
            "with trio.run(main), or call cuca from asyncio through trio-asyncio "
            "(trio_asyncio.open_loop() and trio_as_aio)"
        )


def admitters(
    limiter: TurnGate | None, plugins: Sequence[CucaPlugin]
) -> tuple[tuple[TurnGate, ...], TurnReplay | None]:
    """The gates of a turn (``rate_limiter=``, then the plugins that are gates, in
    order) and the first plugin that replays turns (the response cache)."""
    if limiter is None and not plugins:
        return (), None
    from .admission import TurnGate, TurnReplay

    gates = [] if limiter is None else [limiter]
    gates += [plugin for plugin in plugins if isinstance(plugin, TurnGate)]
    replay = next((p for p in plugins if isinstance(p, TurnReplay)), None)
    if limiter is not None and not isinstance(limiter, TurnGate):
        raise ConfigurationError(
            f"rate_limiter must be a cuca.RateLimiter (a TurnGate), not {kind(limiter)}"
        )
    return tuple(gates), replay
