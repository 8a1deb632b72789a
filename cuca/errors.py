"""The one error vocabulary of cuca.

Every error a turn can produce is a :class:`CucaError`::

    CucaError
    ├── ConfigurationError   the request or client cannot be dispatched as configured
    ├── TransportError       the connection failed, timed out or was cut
    │   ├── ConnectError         no connection could be made (refused, DNS, connect timeout)
    │   ├── ReadTimeout          the server went silent for longer than the read timeout
    │   ├── StreamIncomplete     the body ended before the wire format's end marker
    │   └── DeadlineExceeded     the turn ran past its ``Timeouts.total``
    ├── HttpStatusError      the server answered with a non-2xx status (status, body),
    │   │                        or reported that kind of error inside the stream
    │   ├── AuthenticationError  401 or 403: the key is missing, wrong or not allowed
    │   ├── RateLimitError       429; ``retry_after`` in seconds when the server said
    │   ├── ServerError          5xx: the server failed (or, in the stream, is overloaded)
    │   └── HttpContextOverflowError  the vendor said the prompt does not fit (also below)
    ├── ContextOverflowError the prompt does not fit the model's window (limit, requested)
    ├── SseParseError        the byte stream is not a valid event stream
    ├── JsonError            a frame that should hold JSON does not
    ├── ProviderError        the provider reported an error, or sent something unusable
    │   └── ToolCallError    a tool call whose arguments are not a JSON object (an item)
    ├── PluginError          a plugin hook raised
    ├── OutputValidationError the answer does not fit the request's output schema
    ├── ToolLoopError        the tool loop gave up: a tool called with invalid arguments too often
    ├── TemplateError        a chat template is invalid, hostile or raised itself
    ├── McpError             an MCP server did not start, did not answer, or its session ended
    ├── RateLimitExceeded    cuca's own RateLimiter refused to wait (which limit, how long)
    ├── BudgetExceeded       a Budget refused a turn (spent, projected, limit)
    ├── StoreError           the store of a limiter, budget or cache failed (Redis down)
    └── BatchError           a request of a batch job that never ran
        ├── BatchExpired         the job reached the vendor's deadline first
        ├── BatchCancelled       the job was cancelled first
        └── BatchFailed          the job failed as a whole, or gave no result for it

Errors that end a turn are raised from the stream's iteration; errors that do not
(a malformed tool call, a chunk hook that failed) are yielded in place of a block and
the stream goes on. Messages read like ``configuration error: <what is wrong>``.
No error ever carries request headers, so API keys cannot leak through ``repr``.
"""

from __future__ import annotations

from decimal import Decimal

__all__ = [
    "AuthenticationError",
    "BatchCancelled",
    "BatchError",
    "BatchExpired",
    "BatchFailed",
    "BudgetExceeded",
    "ConfigurationError",
    "ConnectError",
    "ContextOverflowError",
    "CucaError",
    "DeadlineExceeded",
    "HttpContextOverflowError",
    "HttpStatusError",
    "JsonError",
    "McpError",
    "OutputValidationError",
    "PluginError",
    "ProviderError",
    "RateLimitError",
    "RateLimitExceeded",
    "ReadTimeout",
    "ServerError",
    "SseParseError",
    "StoreError",
    "StreamIncomplete",
    "TemplateError",
    "ToolCallError",
    "ToolLoopError",
    "TransportError",
    "http_status_error",
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


class ConnectError(TransportError):
    """No connection could be made: refused, unknown host, or the connect timeout."""


class ReadTimeout(TransportError):
    """The server sent nothing for longer than ``Timeouts.read`` (a stalled stream)."""


class StreamIncomplete(TransportError):
    """The response body ended (or the connection closed) before the wire format's end
    marker: the turn is incomplete, and what arrived before is all there is."""


class DeadlineExceeded(TransportError):
    """The turn ran longer than its ``Timeouts.total`` deadline."""


class HttpStatusError(CucaError):
    """The server answered with a non-2xx status.

    ``body`` is the response body as text; ``message`` is the vendor's own error text
    when the adapter could find it in the body, else the body itself. The common
    statuses raise a subclass: :class:`AuthenticationError`, :class:`RateLimitError`,
    :class:`ServerError`.

    An error a provider reported inside a 200 stream (Anthropic's ``overloaded_error``
    event, an OpenAI ``data: {"error": ...}`` frame) gets the class its kind would have
    as a status: ``status`` is that status (``overloaded_error`` is 529,
    ``rate_limit_error`` 429...), ``body`` the frame, ``provider`` the provider's name
    and ``in_stream`` is true, so that code catching :class:`ServerError` or
    :class:`RateLimitError` treats both alike. ``provider`` is ``None`` for a status.
    """

    prefix = "http status error"

    def __init__(
        self, status: int, body: str, message: str | None = None, *, provider: str | None = None
    ) -> None:
        super().__init__(message if message is not None else body)
        self.args = (status, body, self.message)
        self.status = status
        self.body = body
        self.provider = provider

    @property
    def in_stream(self) -> bool:
        """Whether the provider reported this error inside a 200 stream."""
        return self.provider is not None

    def __str__(self) -> str:
        where = f" (in the {self.provider} stream)" if self.provider is not None else ""
        return f"http status {self.status}{where}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.body!r})"


class AuthenticationError(HttpStatusError):
    """401 or 403: the API key is missing, wrong, or not allowed to do this."""


class RateLimitError(HttpStatusError):
    """429: too many requests. ``retry_after`` is the wait, in seconds, the server asked
    for in its ``Retry-After`` header, or ``None`` when it did not say."""

    def __init__(
        self,
        status: int,
        body: str,
        message: str | None = None,
        retry_after: float | None = None,
        *,
        provider: str | None = None,
    ) -> None:
        super().__init__(status, body, message, provider=provider)
        self.retry_after = retry_after


class ServerError(HttpStatusError):
    """5xx: the server failed (after the retry policy gave up)."""


class ContextOverflowError(CucaError):
    """The prompt (plus, for some vendors, the output asked for) does not fit the
    model's context window.

    ``limit`` is the window and ``requested`` what the request needed, both in tokens,
    each ``None`` when the backend did not say. The local engine raises this class
    itself; an HTTP vendor's answer raises :class:`HttpContextOverflowError`, which is
    also an :class:`HttpStatusError`, so ``except ContextOverflowError`` catches both.
    """

    prefix = "context overflow"

    def __init__(
        self, message: str, limit: int | None = None, requested: int | None = None
    ) -> None:
        super().__init__(message)
        self.args = (message, limit, requested)
        self.limit = limit
        self.requested = requested

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, limit={self.limit!r}, "
            f"requested={self.requested!r})"
        )


class HttpContextOverflowError(HttpStatusError, ContextOverflowError):
    """A vendor's non-2xx answer that says the request is longer than the model's
    window (OpenAI's ``context_length_exceeded``, Anthropic's "prompt is too long",
    llama-server's ``exceed_context_size_error``...). ``status`` and ``body`` are the
    vendor's; ``limit`` and ``requested`` are read from the body when it says them."""

    def __init__(
        self,
        status: int,
        body: str,
        message: str | None = None,
        *,
        limit: int | None = None,
        requested: int | None = None,
    ) -> None:
        super().__init__(status, body, message)
        self.args = (status, body, self.message, limit, requested)
        self.limit = limit
        self.requested = requested

    def __str__(self) -> str:
        where = f" (in the {self.provider} stream)" if self.provider is not None else ""
        return f"http status {self.status}{where}: context overflow: {self.message}"

    def __repr__(self) -> str:
        return (
            f"HttpContextOverflowError({self.status}, {self.body!r}, limit={self.limit!r}, "
            f"requested={self.requested!r})"
        )


def http_status_error(
    status: int,
    body: str,
    message: str | None = None,
    retry_after: float | None = None,
    *,
    provider: str | None = None,
) -> HttpStatusError:
    """The most specific :class:`HttpStatusError` for ``status``."""
    if status in (401, 403):
        return AuthenticationError(status, body, message, provider=provider)
    if status == 429:
        return RateLimitError(status, body, message, retry_after, provider=provider)
    if 500 <= status < 600:
        return ServerError(status, body, message, provider=provider)
    return HttpStatusError(status, body, message, provider=provider)


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


class ToolCallError(ProviderError):
    """A tool call the model made whose arguments are not a JSON object.

    Yielded as an item in place of the call, and the stream goes on. It carries what is
    needed to answer the call and keep the conversation valid: ``tool_call_id`` and
    ``name`` (``None`` when the provider sent none) and ``raw``, the arguments as sent.
    ``message`` reads ``malformed tool call: <raw>``.
    """

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        tool_call_id: str | None = None,
        name: str | None = None,
        raw: str = "",
    ) -> None:
        super().__init__(provider, message)
        self.args = (provider, message, tool_call_id, name, raw)
        self.tool_call_id = tool_call_id
        self.name = name
        self.raw = raw

    def __repr__(self) -> str:
        return (
            f"ToolCallError({self.provider!r}, {self.message!r}, "
            f"tool_call_id={self.tool_call_id!r}, name={self.name!r}, raw={self.raw!r})"
        )


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

    @classmethod
    def hook_failed(cls, plugin: str, hook: str, exc: BaseException) -> PluginError:
        """The error of ``plugin``'s ``hook`` raising ``exc``: ``<hook> failed: <Type>:
        <message>``, the one wording every hook's failure has."""
        return cls(plugin, f"{hook} failed: {type(exc).__name__}: {exc}")


class OutputValidationError(CucaError):
    """The answer to a request with an output schema is not JSON, does not validate
    against the schema, or does not fit the class it came from.

    ``raw`` is the answer's whole text, so nothing is lost; ``message`` says where it
    failed. ``generate`` puts this error in :attr:`cuca.Completion.errors`; with
    ``repair=N``, after the last try fails it is raised with ``attempts``, every try
    (each a :class:`~cuca.stream.Attempt`: its message, its error, its usage).
    """

    prefix = "output validation error"

    def __init__(self, message: str, raw: str, attempts: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.args = (message, raw)
        self.raw = raw
        self.attempts = attempts

    def __repr__(self) -> str:
        return f"OutputValidationError({self.message!r}, raw={self.raw[:200]!r})"


class ToolLoopError(CucaError):
    """The tool loop stopped: the model called one tool with arguments that break its
    schema more than ``max_invalid_calls`` times in the loop.

    ``call`` is the last such :class:`~cuca.ToolCall`, ``problems`` what was wrong with
    it (each an :class:`~cuca.tools.tool.ArgumentProblem`: path, expected, got). The
    loop's ``conversation`` keeps every step, that call's error result included.
    """

    prefix = "tool loop error"

    def __init__(self, message: str, call: object = None, problems: tuple[object, ...] = ()):
        super().__init__(message)
        self.args = (message, call, problems)
        self.call = call
        self.problems = problems

    def __repr__(self) -> str:
        return f"ToolLoopError({self.message!r}, call={self.call!r}, problems={self.problems!r})"


class TemplateError(CucaError):
    """A chat template failed to compile or render, reached for something it may not
    touch, exceeded a limit, or raised through ``raise_exception``."""

    prefix = "template error"


class McpError(CucaError):
    """An MCP server could not be used: its command did not start, it exited or went
    silent before answering ``initialize`` (within ``connect_timeout``), or its session
    ended (the process died, the connection was cut) and it was used again.

    ``server`` names the server (its command or URL); ``stderr`` holds the last lines the
    child process wrote on its standard error (empty for HTTP), the usual place where a
    server says why it failed.
    """

    prefix = "mcp error"

    def __init__(self, server: str, message: str, stderr: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.args = (server, message, stderr)
        self.server = server
        self.stderr = stderr

    def __str__(self) -> str:
        text = f"mcp error ({self.server}): {self.message}"
        if self.stderr:
            text += "; its last stderr lines: " + " | ".join(self.stderr[-5:])
        return text

    def __repr__(self) -> str:
        return f"McpError({self.server!r}, {self.message!r}, stderr={self.stderr!r})"


class RateLimitExceeded(CucaError):
    """A :class:`~cuca.RateLimiter` refused a turn rather than wait: ``max_waiters`` turns
    were already waiting, or the wait would pass ``max_wait``. ``limit`` names the limit
    (``"requests_per_minute"``, ``"max_waiters"``...), ``wait`` the seconds it would have
    taken (``None`` when unknown). Nothing was sent."""

    prefix = "rate limit exceeded"

    def __init__(self, limit: str, wait: float | None, message: str) -> None:
        super().__init__(message)
        self.args = (limit, wait, message)
        self.limit = limit
        self.wait = wait


class BudgetExceeded(CucaError):
    """A :class:`~cuca.Budget` refused a turn before it went out: what was ``spent`` (and
    reserved by turns in flight), the turn's ``projected`` cost, and the ``limit``, in the
    budget's unit (``unit``: ``"usd"``, the figures ``Decimal`` dollars as
    ``response.cost`` is, or ``"tokens"``, the figures ints). ``projected`` is ``None``
    for a model without a price, refused under ``on_unpriced="refuse"``."""

    prefix = "budget exceeded"

    def __init__(
        self,
        unit: str,
        spent: Decimal | int,
        projected: Decimal | int | None,
        limit: Decimal | int,
        message: str,
    ) -> None:
        super().__init__(message)
        self.args = (unit, spent, projected, limit, message)
        self.unit = unit
        self.spent = spent
        self.projected = projected
        self.limit = limit


class StoreError(CucaError):
    """The store behind a limiter, a budget or a cache failed (Redis unreachable or
    stopped, a SQLite file locked or unwritable): the turn ends with this error, never a
    hang and never a silent pass, unless the feature was built with ``fail_open=True``."""

    prefix = "store error"


class BatchError(CucaError):
    """A request of a batch job that never ran (:meth:`cuca.batches.BatchJob.results`
    gives it in that request's place). A request that ran and failed gives the error a
    turn would have raised instead (an :class:`HttpStatusError` of its kind)."""

    prefix = "batch error"


class BatchExpired(BatchError):
    """The job reached the vendor's deadline (24 hours) before this request ran: it
    was not billed; submit it again."""


class BatchCancelled(BatchError):
    """The job was cancelled before this request ran: it was not billed."""


class BatchFailed(BatchError):
    """The job failed as a whole (the vendor refused its input: the message says why),
    or ended without a result for this request."""
