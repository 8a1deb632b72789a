"""When a /chat/completions server says the prompt does not fit.

- OpenAI: ``error.code == "context_length_exceeded"``; numbers from "maximum context
  length is L tokens. However, your messages resulted in R tokens".
- vLLM, DeepSeek, LM Studio: "maximum context length" in the message; "you requested R
  tokens", or vLLM's "(M > L - P)" when ``max_tokens`` is what does not fit.
- llama-server: ``error.type == "exceed_context_size_error"`` with ``n_ctx`` and
  ``n_prompt_tokens``; older builds' "exceeds the available context size".
"""

from __future__ import annotations

import re

from ..decoding import Overflow, error_object, json_int

__all__ = ["chat_overflow"]


_LIMIT = re.compile(r"maximum context length is (\d+)")
_REQUESTED = re.compile(
    r"(?:you requested|resulted in|your request has|requested) (\d+)(?: input)? tokens"
)
_SUM = re.compile(r"\((\d+) > (\d+) - (\d+)\)")  # vLLM: (max_tokens > limit - prompt)


def chat_overflow(status: int, body: str) -> Overflow | None:
    """OpenAI-compatible servers: OpenAI's ``context_length_exceeded`` code, llama-server's
    ``exceed_context_size_error`` type, and the "maximum context length" message that
    vLLM, DeepSeek and OpenAI's older models write."""
    error = error_object(body)
    if error is None:
        return None
    message = error.get("message")
    text = message if isinstance(message, str) else ""
    if error.get("type") == "exceed_context_size_error":
        return Overflow(json_int(error.get("n_ctx")), json_int(error.get("n_prompt_tokens")))
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
