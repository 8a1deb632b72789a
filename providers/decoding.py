"""What every stream decoder reads the same way, written once.

Vendor JSON is untrusted: a count may arrive as ``true`` or ``"12"``, tool-call
arguments as any text, an error body as anything. Each helper has one behaviour for
every adapter, so that the same bytes mean the same thing whoever decodes them.

Stream frames are decoded by :func:`decode_frame` straight into the ``msgspec`` structs
each decoder declares for its vendor's shapes (C speed, unknown fields ignored). One
rule covers a value of the wrong type anywhere in a frame, for every vendor: it counts
as absent, as if the vendor had not sent it (a ``true`` token count is no count, a
choice that is a number is no choice). A decoder declares a field ``Any`` where a wrong
type must be shown rather than dropped (a tool call's arguments, Gemini's whole
``functionCall``: a call is never lost, it becomes a ``ToolCallError``); ``null`` is
declared absent, never a wrong type. Only a frame that is not the expected JSON object
at all, or holds over ``MAX_DROPPED`` wrongly typed values, is a ``ProviderError``, and
text that is not JSON a ``JsonError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import msgspec

from cuca.errors import (
    CucaError,
    HttpContextOverflowError,
    JsonError,
    ProviderError,
    ToolCallError,
    http_status_error,
)
from cuca.types import ToolCall

__all__ = [
    "STREAM_ERROR_STATUS",
    "Overflow",
    "Shape",
    "decode_frame",
    "error_object",
    "error_text",
    "finished_call",
    "json_body",
    "json_dict",
    "json_int",
    "json_list",
    "loads_json",
    "result_lines",
    "stream_error",
    "streamed_arguments",
]

T = TypeVar("T")

MAX_DROPPED = 16
"""Wrongly typed values dropped from one frame before it is refused: each drop
validates the frame again, so a hostile frame full of them costs a bounded time."""

_UNTYPED = msgspec.json.Decoder(float_hook=float)
"""The slow path's plain decoding: a float out of range (``1e400``) is ``inf``, as
``json.loads`` reads it, so that it is one wrongly typed value rather than a whole
frame refused."""

_WHERE = re.compile(r" - at `\$((?:\.\w+|\[\d+\])+)`$")
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]")


class Shape(msgspec.Struct, gc=False):
    """Base of the structs that declare a vendor's frames. A decoded frame holds no
    reference cycle, so the garbage collector need not track it (``gc=False``): one
    less cost per chunk."""


def decode_frame(decoder: msgspec.json.Decoder[T], data: str, provider: str) -> T:
    """One frame as the struct ``decoder`` makes: :class:`~cuca.errors.JsonError` for text
    that is not JSON, the struct without its wrongly typed values otherwise (see the
    module docstring), :class:`~cuca.errors.ProviderError` when the frame itself is of the
    wrong type (an array for an object) or holds over ``MAX_DROPPED`` wrongly typed values.

    The value to drop is found in ``msgspec``'s message (``... - at `$.a[0].b```), the only
    place it names it; tests/test_decoding.py locks that form."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError:
        pass  # JSON, but not all of the declared types: the slow path below
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: hostile depth
        raise _not_json(data, provider) from exc
    try:
        value = _UNTYPED.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        # the typed decoding stopped at the first wrongly typed value: the text after it
        # is read for the first time here, and may not be JSON
        raise _not_json(data, provider) from exc
    for _ in range(MAX_DROPPED):
        try:
            return msgspec.convert(value, decoder.type)  # type: ignore[no-any-return]
        except msgspec.ValidationError as exc:
            if not _drop(value, str(exc)):
                message = f"unexpected frame ({exc}): {data[:200]}"
                raise ProviderError(provider, message) from None
    message = f"unexpected frame (over {MAX_DROPPED} values of the wrong type): {data[:200]}"
    raise ProviderError(provider, message)


def loads_json(data: str, provider: str) -> Any:
    """``json.loads`` that raises :class:`~cuca.errors.JsonError` naming the provider."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise _not_json(data, provider) from exc


def error_text(error: Any) -> str:
    """The human part of a vendor error value (``{"message": ...}`` or a bare string)."""
    if isinstance(error, str):
        return error
    if isinstance(error, Mapping):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
    return json.dumps(error, ensure_ascii=False)


def _not_json(data: str, provider: str) -> JsonError:
    return JsonError(f"{provider} sent a frame that is not JSON: {data[:200]!r}")


def _drop(value: Any, error: str) -> bool:
    """Remove the value a ``msgspec`` validation error points at (a key, or a list
    element) from ``value``; ``False`` when it points at the frame itself."""
    where = _WHERE.search(error)
    if where is None:
        return False
    steps = [key if key else int(index) for key, index in _STEP.findall(where.group(1))]
    try:
        for step in steps[:-1]:
            value = value[step]
        del value[steps[-1]]
    except (LookupError, TypeError):  # not a path into this value: nothing to drop
        return False
    return True


def streamed_arguments(raw: str) -> dict[str, Any] | None:
    """The arguments of a streamed tool call from their JSON text: a JSON object, ``{}``
    for empty text (a call sent no argument fragment), ``None`` for anything else (not
    JSON, not an object, absurdly deep), which the decoder reports as a
    ``ToolCallError``. Not :func:`cuca.types.tool_arguments`, the rule of a ``ToolCall``
    built by a user (seed 000), which refuses what it cannot take."""
    text = raw.strip()
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: hostile nesting depth
        return None
    return parsed if isinstance(parsed, dict) else None


def finished_call(
    provider: str, call_id: str, name: str | None, raw: str
) -> ToolCall | ToolCallError:
    """A streamed call whose fragments are all in: the ``ToolCall``, or a
    ``ToolCallError`` with its id (and name, when it has one) and the text that came,
    when it has no name or its arguments (``raw``) are not a JSON object."""
    if not name:
        message = f"malformed tool call: no function name: {raw}"
        return ToolCallError(provider, message, tool_call_id=call_id, raw=raw)
    arguments = streamed_arguments(raw)
    if arguments is None:
        message = f"malformed tool call: {raw}"
        return ToolCallError(provider, message, tool_call_id=call_id, name=name, raw=raw)
    return ToolCall(call_id, name, arguments)


def json_body(body: str) -> Any:
    """A non-2xx body as JSON (a one-element list unwrapped, as Gemini sends it), or
    ``None`` when it is not JSON."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, list) and len(data) == 1:
        return data[0]
    return data


STREAM_ERROR_STATUS: dict[str, int] = {
    # Anthropic's error types, with the statuses its errors page gives them
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "billing_error": 402,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
    # OpenAI (chat and Responses), vLLM and llama.cpp types and codes
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "exceed_context_size_error": 400,
    "not_supported_error": 501,
    "unavailable_error": 503,
    # Gemini's (Google RPC) status names, with their HTTP mappings
    "invalid_argument": 400,
    "failed_precondition": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "resource_exhausted": 429,
    "internal": 500,
    "unavailable": 503,
    "deadline_exceeded": 504,
}
"""The HTTP status a vendor's error kind stands for, when it arrives inside a stream."""


OverflowCheck = Callable[[int, str], Any]
"""A vendor's ``overflow(status, body)`` of :mod:`.overflow`: an ``Overflow`` (with
``limit`` and ``requested``) when the body says the prompt does not fit, else ``None``."""


def stream_error(
    provider: str, message: str, error: Any, frame: str, overflow: OverflowCheck | None = None
) -> CucaError:
    """An error a server reported inside a 200 stream, as the kind its HTTP status would
    have been: :class:`~cuca.errors.ServerError` for an overloaded or failing server,
    :class:`~cuca.errors.RateLimitError` for a rate limit, the
    :class:`~cuca.errors.HttpStatusError` of its status for a bad request (``provider``
    set, ``body`` the frame). ``error`` is the vendor's error object: its integer
    ``code`` when it is an HTTP status (llama.cpp, vLLM, Gemini; LiteLLM's proxy writes
    it as a string of three digits), else its ``type``,
    ``code`` or ``status`` name (:data:`STREAM_ERROR_STATUS`). A 4xx kind that
    ``overflow`` recognises as "the prompt does not fit" is an
    :class:`~cuca.errors.HttpContextOverflowError`, as the status would have been. An
    error of no known kind is a :class:`~cuca.errors.ProviderError`, as before."""
    status = _implied_status(error)
    if status is None:
        return ProviderError(provider, message)
    found = overflow(status, frame) if overflow is not None and 400 <= status < 500 else None
    if found is not None:
        exc = HttpContextOverflowError(
            status, frame, message, limit=found.limit, requested=found.requested
        )
        exc.provider = provider
        return exc
    return http_status_error(status, frame, message, provider=provider)


def _implied_status(error: Any) -> int | None:
    if not isinstance(error, dict):
        return None
    code = error.get("code")
    if type(code) is str and len(code) == 3 and code.isascii() and code.isdigit():
        code = int(code)  # LiteLLM's proxy writes the status as a string ("code": "429")
    if type(code) is int and 400 <= code < 600:
        return code
    for key in ("type", "code", "status"):
        value = error.get(key)
        if isinstance(value, str) and (status := STREAM_ERROR_STATUS.get(value.lower())):
            return status
    return None


def result_lines(content: bytes, provider: str) -> list[dict[str, Any]]:
    """The lines of a JSONL results file (a batch job's), each a JSON object; a line
    that is not one is a :class:`~cuca.errors.ProviderError` that shows it."""
    lines: list[dict[str, Any]] = []
    for text in content.decode("utf-8", errors="replace").splitlines():
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except (ValueError, RecursionError):
            line = None
        if not isinstance(line, dict):
            raise ProviderError(provider, f"a batch result line cuca cannot read: {text[:200]}")
        lines.append(line)
    return lines


@attrs.frozen
class Overflow:
    """A recognised overflow: the window (``limit``) and what the request needed
    (``requested``), in tokens, when the vendor said."""

    limit: int | None = None
    requested: int | None = None


def json_int(value: Any) -> int | None:
    """An integer from vendor JSON, or ``None`` (a bool is not one)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_object(body: str) -> Mapping[str, Any] | None:
    """The ``error`` object of an OpenAI-shaped body, or the body itself when it is
    the flat ``{"object": "error", "message": ...}`` of older vLLM builds."""
    data = json_body(body)
    if not isinstance(data, Mapping):
        return None
    error = data.get("error")
    if isinstance(error, Mapping):
        return error
    if isinstance(error, str):
        return {"message": error}
    return data if isinstance(data.get("message"), str) else None


def json_list(value: Any) -> list[Any]:
    """``value`` if it is a JSON array, else an empty list."""
    return value if isinstance(value, list) else []


def json_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty dict."""
    return value if isinstance(value, dict) else {}
