"""What the server side of every wire shares (``cuca serve``, and ``cuca.testing``'s
scripted replies): the end of a served turn, the finish reasons, the error kinds,
the signature seal, and one server-sent event's bytes.

Each wire's folder holds its own ``inbound.py`` (a request body a server receives ->
:class:`~cuca.types.UnifiedRequest`) and ``outbound.py`` (blocks, usage and finish
reason -> that wire's frames and whole-response JSON); they meet here on the few
facts that are not one wire's: what ended a turn (:class:`Ending`), which of a
handful of reasons it was (:func:`finish_kind`), which kind of error a
:class:`~cuca.errors.CucaError` is to a client (:func:`error_kind`), and how a
thinking block's signature is sealed on the way out and opened on the way in
(:class:`Signatures`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from cuca._checks import kind
from cuca.errors import (
    AuthenticationError,
    BudgetExceeded,
    ConfigurationError,
    ContextOverflowError,
    DeadlineExceeded,
    HttpStatusError,
    RateLimitError,
    RateLimitExceeded,
    ReadTimeout,
    ServerError,
    ToolCallError,
)
from cuca.turn import Item
from cuca.types import (
    PromptCacheUsage,
    ProviderEndpoint,
    Thinking,
    TokenUsage,
    UnifiedRequest,
)

__all__ = [
    "PASS_THROUGH",
    "Body",
    "Ending",
    "ErrorKind",
    "Finish",
    "Inbound",
    "Item",
    "PassThrough",
    "Signatures",
    "dumps",
    "error_kind",
    "finish_kind",
    "sse",
]

Finish: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter"]
"""A served turn's finish reason, before each wire names it its own way."""

ErrorKind: TypeAlias = Literal[
    "invalid_request",
    "authentication",
    "permission",
    "not_found",
    "request_too_large",
    "rate_limit",
    "timeout",
    "overloaded",
    "server",
]
"""What an error is to the client that sent the request, before each wire names it."""

_LENGTH = frozenset({"length", "max_tokens", "max_output_tokens", "context_length", "MAX_TOKENS"})
_FILTER = frozenset({"content_filter", "refusal", "SAFETY", "RECITATION", "PROHIBITED_CONTENT"})


@attrs.frozen
class Ending:
    """What ended a served turn: its usage, its prompt-cache usage and the backend's
    finish reason (any backend's spelling: ``"stop"``, ``"end_turn"``, ``"length"``...).
    A :class:`~cuca.types.TurnSummary` or a :class:`~cuca.types.UnifiedResponse` has
    these three fields and converts with :meth:`of`."""

    usage: TokenUsage | None = None
    prompt_cache_usage: PromptCacheUsage | None = None
    finish_reason: str | None = None

    @classmethod
    def of(cls, record: Any) -> Ending:
        """The ending of a turn summary or a response (anything with the three fields)."""
        return cls(record.usage, record.prompt_cache_usage, record.finish_reason)


def finish_kind(reason: str | None, called: bool) -> Finish:
    """The finish of a turn that ended with ``reason`` and wrote a tool call or not.

    ``tool_calls`` only when a call was written (seed 004: the finish reason names a
    call only when one exists; a backend that says ``tool_use`` and sent none ends as
    ``stop``); a cut (``length``, ``max_tokens``, a full context) stays a cut even
    after a call, so a client never runs a call the model did not finish deciding on.
    """
    if reason in _LENGTH:
        return "length"
    if reason in _FILTER:
        return "content_filter"
    return "tool_calls" if called else "stop"


def error_kind(error: BaseException, status: int | None = None) -> tuple[int, ErrorKind]:
    """The HTTP status and kind a client is told for ``error`` (for ``status`` when the
    server chose it: a refused key is 401, an unknown model 404, a slow body 408...).

    A backend's own 401 or 403 is the gateway's failure, not the client's key: it is a
    502, so a client never takes a wrong upstream key for its own."""
    if status is not None:
        return status, _STATUS_KINDS.get(status, "server" if status >= 500 else "invalid_request")
    if isinstance(error, ContextOverflowError) and not isinstance(error, HttpStatusError):
        return 400, "invalid_request"
    if isinstance(error, ToolCallError):  # the model's output, not the client's input
        return 500, "server"
    if isinstance(error, ConfigurationError):
        return 400, "invalid_request"
    if isinstance(error, (RateLimitExceeded, BudgetExceeded, RateLimitError)):
        return 429, "rate_limit"
    if isinstance(error, AuthenticationError):
        return 502, "server"
    if isinstance(error, (ReadTimeout, DeadlineExceeded)):
        return 504, "timeout"
    if isinstance(error, ServerError):
        return (529, "overloaded") if error.status in (503, 529) else (502, "server")
    if isinstance(error, HttpStatusError) and 400 <= error.status < 500:
        return error.status, _CLIENT_KINDS.get(error.status, "invalid_request")
    return 500, "server"


_CLIENT_KINDS: dict[int, ErrorKind] = {
    404: "not_found",
    413: "request_too_large",
    429: "rate_limit",
}
_STATUS_KINDS: dict[int, ErrorKind] = {
    **_CLIENT_KINDS,
    401: "authentication",
    403: "permission",
    408: "timeout",
    529: "overloaded",
}


class Signatures(Protocol):
    """How a thinking block's signature crosses the server.

    ``seal`` gives the signature a client is sent for a complete block (its text, the
    signature the backend gave and the backend that gave it, both ``None`` for a
    backend that signs nothing, such as the local engine); ``open`` gives back the
    block a client's ``(text, signature)`` stands for, with the signature, issuer and
    id the backend will accept, or raises :class:`~cuca.errors.ConfigurationError` for
    a signature it did not issue. ``ident`` is the backend's id of the block (a
    Responses reasoning item's ``id``, which that backend needs back beside its
    ``encrypted_content``)."""

    def seal(
        self,
        text: str,
        signature: str | None,
        issuer: ProviderEndpoint | None,
        ident: str | None = None,
    ) -> str:
        """The signature to send for a thinking block."""
        ...

    def open(self, text: str, signature: str, *, redacted: bool = False) -> Thinking:
        """The block a client's thinking ``text`` and ``signature`` stand for."""
        ...


@attrs.frozen
class PassThrough:
    """Signatures as they are: sent as the backend gave them (``""`` for none), and
    read back as issued by ``issuer`` (``None``: by no one, replayed to no backend).
    What ``UnifiedRequest.from_anthropic`` and the scripted replies use; a server
    that answers for several backends seals its own (:mod:`cuca.serve`)."""

    issuer: ProviderEndpoint | None = None

    def seal(
        self,
        text: str,
        signature: str | None,
        issuer: ProviderEndpoint | None,
        ident: str | None = None,
    ) -> str:
        return signature or ""

    def open(self, text: str, signature: str, *, redacted: bool = False) -> Thinking:
        if not signature:
            return Thinking(text)
        return Thinking(text, signature=signature, provider=self.issuer, redacted=redacted)


PASS_THROUGH = PassThrough()


def dumps(value: Any) -> str:
    """Compact JSON, text kept as it is (no ``\\uXXXX`` for what is not ASCII)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: ``event: NAME`` when named, then ``data:`` with ``data``
    as compact JSON (a string is sent as it is, like ``[DONE]``), then a blank line."""
    text = data if isinstance(data, str) else dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


# -- reading a request body ------------------------------------------------------------


@attrs.frozen
class Inbound:
    """A request body as a server reads it: the request, and what the wire asks of the
    answer besides (``include_usage``: chat's ``stream_options.include_usage``)."""

    request: UnifiedRequest
    include_usage: bool = False


_MISSING: Any = object()


class Body:
    """One JSON object of a request body, read field by field; each wrong value is a
    :class:`~cuca.errors.ConfigurationError` naming where it is (``messages[2].content``),
    which the server answers with the wire's 400.

    Every key a reader looks at is noted. A ``strict`` body (what
    ``cuca.from_openai`` and ``cuca.from_anthropic`` read) is finished with
    :meth:`finish`, which refuses the first key of it, or of any object read inside it,
    that no reader looked at: a field cuca has no place for would be lost. A lenient
    body (the server's) ignores such keys, as OpenAI-compatible servers do.
    """

    def __init__(
        self,
        value: Any,
        where: str = "body",
        *,
        strict: bool = False,
        _all: list[Body] | None = None,
    ) -> None:
        if not isinstance(value, dict):
            raise ConfigurationError(f"{where} must be a JSON object, not {kind(value)}")
        self.value: dict[str, Any] = value
        self.where = where
        self.strict = strict
        self.read: set[str] = set()
        self._all = _all if _all is not None else []
        self._all.append(self)

    def at(self, key: str) -> str:
        return key if self.where == "body" else f"{self.where}.{key}"

    def get(self, key: str, *types: type, required: bool = False, what: str = "") -> Any:
        """The value at ``key`` if it is one of ``types`` (``None`` when absent or null,
        unless ``required``)."""
        self.read.add(key)
        value = self.value.get(key, _MISSING)
        if value is _MISSING or value is None:
            if required:
                raise ConfigurationError(f"{self.at(key)} is required")
            return None
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            wanted = what or " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise ConfigurationError(f"{self.at(key)} must be {wanted}, not {kind(value)}")
        return value

    def text(self, key: str, *, required: bool = False) -> str | None:
        value: str | None = self.get(key, str, required=required)
        return value

    def boolean(self, key: str) -> bool | None:
        value: bool | None = self.get(key, bool)
        return value

    def integer(self, key: str, *, minimum: int = 0) -> int | None:
        value: int | None = self.get(key, int)
        if value is not None and value < minimum:
            raise ConfigurationError(f"{self.at(key)} must be at least {minimum}, not {value}")
        return value

    def number(self, key: str) -> float | None:
        value = self.get(key, int, float)
        return None if value is None else float(value)

    def object(self, key: str, *, required: bool = False) -> Body | None:
        value = self.get(key, dict, required=required)
        return None if value is None else self._child(value, self.at(key))

    def objects(self, key: str, *, required: bool = False) -> list[Body]:
        """The list at ``key`` (``[]`` when absent), each element an object."""
        value = self.get(key, list, required=required) or []
        return [self._child(v, f"{self.at(key)}[{i}]") for i, v in enumerate(value)]

    def _child(self, value: Any, where: str) -> Body:
        return Body(value, where, strict=self.strict, _all=self._all)

    def default(self, key: str, value: Any, why: str) -> None:
        """Accept ``key`` only at ``value`` (or absent, or null): the value that asks
        cuca for nothing it does not already do. Another value is refused on a strict
        body (``why`` says what cuca does instead) and ignored on a lenient one."""
        self.read.add(key)
        given = self.value.get(key)
        if self.strict and given is not None and given != value:
            raise ConfigurationError(
                f"{self.at(key)} is {given!r}, and cuca carries only {value!r} ({why})"
            )

    def finish(self, hints: Mapping[str, str] | None = None) -> None:
        """On a strict body, refuse the first key no reader looked at, here or in any
        object read inside (``hints``: what to say about a key, by name)."""
        if not self.strict:
            return
        for body in self._all:
            for key, value in body.value.items():
                if key not in body.read and value is not None:
                    hint = (hints or {}).get(key)
                    why = f" ({hint})" if hint else ""
                    raise ConfigurationError(
                        f"{body.at(key)} has no place in a cuca request{why}: it would be "
                        "lost, so it is refused; remove it"
                    )


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    dict: "an object",
    list: "an array",
}
