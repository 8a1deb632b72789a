"""Each vendor's "the prompt does not fit" answer, recognised in a non-2xx body.

I/O-free: a function per error shape takes the status and body of a refused request
and returns the window and the size asked for (each ``None`` when the body does not
say), or ``None`` when the body is some other error. The adapters turn a match into
:class:`~cuca.errors.HttpContextOverflowError` at their error boundary
(:meth:`ProviderAdapter.status_error`).

- OpenAI: ``error.code == "context_length_exceeded"``; numbers from "maximum context
  length is L tokens. However, your messages resulted in R tokens".
- vLLM, DeepSeek, LM Studio: "maximum context length" in the message; "you requested R
  tokens", or vLLM's "(M > L - P)" when ``max_tokens`` is what does not fit.
- llama-server: ``error.type == "exceed_context_size_error"`` with ``n_ctx`` and
  ``n_prompt_tokens``; older builds' "exceeds the available context size".
- Anthropic: "prompt is too long: R tokens > L maximum", or "input length and
  `max_tokens` exceed context limit: P + M > L".
- Gemini: a 400 "The input token count (R) exceeds the maximum number of tokens allowed
  (L)."
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from .decoding import json_body

__all__ = ["Overflow", "anthropic_overflow", "any_overflow", "chat_overflow", "gemini_overflow"]


@attrs.frozen
class Overflow:
    """A recognised overflow: the window (``limit``) and what the request needed
    (``requested``), in tokens, when the vendor said."""

    limit: int | None = None
    requested: int | None = None


_LIMIT = re.compile(r"maximum context length is (\d+)")
_REQUESTED = re.compile(
    r"(?:you requested|resulted in|your request has|requested) (\d+)(?: input)? tokens"
)
_SUM = re.compile(r"\((\d+) > (\d+) - (\d+)\)")  # vLLM: (max_tokens > limit - prompt)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error_of(body: str) -> Mapping[str, Any] | None:
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


def chat_overflow(status: int, body: str) -> Overflow | None:
    """OpenAI-compatible servers: OpenAI's ``context_length_exceeded`` code, llama-server's
    ``exceed_context_size_error`` type, and the "maximum context length" message that
    vLLM, DeepSeek and OpenAI's older models write."""
    error = _error_of(body)
    if error is None:
        return None
    message = error.get("message")
    text = message if isinstance(message, str) else ""
    if error.get("type") == "exceed_context_size_error":
        return Overflow(_int(error.get("n_ctx")), _int(error.get("n_prompt_tokens")))
    if error.get("code") != "context_length_exceeded" and "maximum context length" not in text:
        if "exceeds the available context size" not in text:  # llama-server, older builds
            return None
    limit = _LIMIT.search(text)
    summed = _SUM.search(text)
    if summed is not None:
        wanted, window, prompt = (int(g) for g in summed.groups())
        return Overflow(window, wanted + prompt)
    requested = _REQUESTED.search(text)
    return Overflow(
        int(limit.group(1)) if limit else None, int(requested.group(1)) if requested else None
    )


_TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
_EXCEEDS = re.compile(r"exceed context limit: (\d+) \+ (\d+) > (\d+)")


def anthropic_overflow(status: int, body: str) -> Overflow | None:
    """Anthropic (and the DeepSeek bridge): ``prompt is too long: R tokens > L maximum``,
    or ``input length and `max_tokens` exceed context limit: P + M > L``."""
    error = _error_of(body)
    message = error.get("message") if error is not None else None
    if not isinstance(message, str):
        return None
    if (found := _TOO_LONG.search(message)) is not None:
        return Overflow(int(found.group(2)), int(found.group(1)))
    if (found := _EXCEEDS.search(message)) is not None:
        prompt, output, limit = (int(g) for g in found.groups())
        return Overflow(limit, prompt + output)
    if "prompt is too long" in message or "exceed context limit" in message:
        return Overflow()
    return None


_GEMINI = re.compile(
    r"input token count \(?(\d+)\)? exceeds the maximum number of tokens allowed \(?(\d+)\)?"
)


def gemini_overflow(status: int, body: str) -> Overflow | None:
    """Gemini's 400 ``INVALID_ARGUMENT``: "The input token count (R) exceeds the maximum
    number of tokens allowed (L)."."""
    error = _error_of(body)
    message = error.get("message") if error is not None else None
    if status != 400 or not isinstance(message, str):
        return None
    found = _GEMINI.search(message)
    if found is None:
        return None
    return Overflow(int(found.group(2)), int(found.group(1)))


def any_overflow(status: int, body: str) -> Overflow | None:
    """Any vendor's overflow: for an error read where the wire is not known (a 200 JSON
    body holding ``{"error": ...}``, which every wire decodes alike)."""
    return (
        chat_overflow(status, body)
        or anthropic_overflow(status, body)
        or gemini_overflow(status, body)
    )
