"""The one error vocabulary of cuca.

Every error a turn can produce is a :class:`CucaError`::

    CucaError
    ├── ConfigurationError   the request or client cannot be dispatched as configured
    ├── TransportError       the connection failed, timed out or was cut
    ├── HttpStatusError      the server answered with a non-2xx status (status, body)
    ├── SseParseError        the byte stream is not a valid event stream
    ├── JsonError            a frame that should hold JSON does not
    ├── ProviderError        the provider reported an error, or sent something unusable
    ├── PluginError          a plugin hook raised
    └── TemplateError        a chat template is invalid, hostile or raised itself

Errors that end a turn are raised from the stream's iteration; errors that do not
(a malformed tool call, a chunk hook that failed) are yielded in place of a block and
the stream goes on. Messages read like ``configuration error: <what is wrong>``.
No error ever carries request headers, so API keys cannot leak through ``repr``.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "CucaError",
    "HttpStatusError",
    "JsonError",
    "PluginError",
    "ProviderError",
    "SseParseError",
    "TemplateError",
    "TransportError",
]


class CucaError(Exception):
    """Base of every error cuca raises or yields."""

    prefix = "cuca error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.prefix}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.args == other.args

    def __hash__(self) -> int:
        return hash((type(self), self.args))


class ConfigurationError(CucaError):
    """The client or request cannot be dispatched as configured (checked before any I/O)."""

    prefix = "configuration error"


class TransportError(CucaError):
    """The connection could not be made, timed out, or was cut before the turn ended."""

    prefix = "transport error"


class HttpStatusError(CucaError):
    """The server answered with a non-2xx status.

    ``body`` is the response body as text; ``message`` is the vendor's own error text
    when the adapter could find it in the body, else the body itself.
    """

    prefix = "http status error"

    def __init__(self, status: int, body: str, message: str | None = None) -> None:
        super().__init__(message if message is not None else body)
        self.args = (status, body, self.message)
        self.status = status
        self.body = body

    def __str__(self) -> str:
        return f"http status {self.status}: {self.message}"

    def __repr__(self) -> str:
        return f"HttpStatusError({self.status}, {self.body!r})"


class SseParseError(CucaError):
    """The byte stream broke the event-stream rules (for example, invalid UTF-8)."""

    prefix = "sse parse error"


class JsonError(CucaError):
    """A frame that must hold JSON could not be decoded."""

    prefix = "json error"


class ProviderError(CucaError):
    """The provider reported an error, or sent a frame or tool call that cannot be used.

    ``provider`` names the backend (``"openai"``, ``"anthropic"``, ``"local"``...);
    ``message`` is the text a user reads, such as ``malformed tool call: <body>``.
    """

    prefix = "provider error"

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(message)
        self.args = (provider, message)
        self.provider = provider

    def __str__(self) -> str:
        return f"provider error ({self.provider}): {self.message}"

    def __repr__(self) -> str:
        return f"ProviderError({self.provider!r}, {self.message!r})"


class PluginError(CucaError):
    """A plugin hook raised; ``plugin`` is the plugin's name."""

    prefix = "plugin error"

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(message)
        self.args = (plugin, message)
        self.plugin = plugin

    def __str__(self) -> str:
        return f"plugin error ({self.plugin}): {self.message}"

    def __repr__(self) -> str:
        return f"PluginError({self.plugin!r}, {self.message!r})"


class TemplateError(CucaError):
    """A chat template failed to compile or render, reached for something it may not
    touch, exceeded a limit, or raised through ``raise_exception``."""

    prefix = "template error"
