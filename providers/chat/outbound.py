"""A served turn as the ``/chat/completions`` wire writes it: ``chat.completion.chunk``
frames (:class:`ChatStream`) or one ``chat.completion`` (:func:`completion`).

Field names and order follow OpenAI's recorded streams (``reference/wire.md`` 1.2) and
the ``openai`` package's types; what OpenAI has no field for follows seed 004:

- Reasoning travels beside the answer as ``reasoning``, and also as
  ``reasoning_content``, with the same text. The clients users run read one or the
  other: ``reasoning_content`` is what DeepSeek, llama.cpp, LM Studio and vLLM before
  0.10 send and what LiteLLM, Open WebUI and LangChain wrappers read; ``reasoning`` is
  what vLLM since 0.10, OpenRouter, Ollama and LocalAI send. vLLM sent both during its
  rename, and clients that read both take the first one set (cuca's decoder, the
  DeepSeek and OpenRouter SDKs), so both are written: no client loses the reasoning.
- A tool call goes out whole, in two fragments as OpenAI sends it: its id, type and
  name with empty arguments, then its arguments. A call whose arguments were not a
  JSON object (a :class:`~cuca.errors.ToolCallError` item) goes out with the text the
  model wrote as its arguments: reported to the client, never dropped.
- ``finish_reason`` is ``tool_calls`` only when a call was written
  (:func:`~cuca.providers.serving.finish_kind`).
- ``usage`` rides on a last chunk with ``choices: []`` when the request asked for it
  (``stream_options.include_usage``) and the backend counted the turn (a turn
  without counts has no usage chunk, and ``usage: null`` when whole), as OpenAI
  sends it; reasoning tokens in
  ``completion_tokens_details``, cache reads and writes in ``prompt_tokens_details``
  (``cached_tokens``, ``cache_write_tokens``).
- An error inside the stream is ``data: {"error": {...}}`` and then ``data: [DONE]``,
  the form the ``openai`` package raises ``APIError`` for.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Sequence
from typing import Any

from cuca.errors import CucaError, ToolCallError
from cuca.types import Text, Thinking, ToolCall

from ..serving import Ending, ErrorKind, Item, error_kind, finish_kind, sse

__all__ = [
    "ChatStream",
    "completion",
    "error_body",
    "error_frame",
    "models_body",
    "new_completion_id",
    "usage_body",
]

REASONING_KEYS = ("reasoning", "reasoning_content")
"""The delta and message keys reasoning is written under (see the module docstring)."""

ERROR_TYPES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "request_too_large": "invalid_request_error",
    "rate_limit": "rate_limit_exceeded",
    "timeout": "timeout",
    "overloaded": "server_error",
    "server": "server_error",
}
"""The ``error.type`` of each kind of error (OpenAI's names)."""

_DONE = b"data: [DONE]\n\n"


def new_completion_id() -> str:
    """A fresh ``chatcmpl-`` id."""
    return "chatcmpl-" + secrets.token_hex(12)


def usage_body(ending: Ending) -> dict[str, Any] | None:
    """The ``usage`` object of a turn: prompt and completion tokens and their total,
    cache reads as ``prompt_tokens_details.cached_tokens`` and reasoning as
    ``completion_tokens_details.reasoning_tokens`` when known. ``None`` for a turn
    whose backend counted nothing (llama.cpp's ``/completion`` route, as cuca reads it):
    no count is made up."""
    usage = ending.usage
    if usage is None and ending.prompt_cache_usage is None:
        return None
    prompt = usage.prompt_tokens if usage is not None else 0
    output = usage.completion_tokens if usage is not None else 0
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
    }
    cache = ending.prompt_cache_usage
    if cache is not None:
        details = {"cached_tokens": cache.read_tokens, "cache_write_tokens": cache.write_tokens}
        body["prompt_tokens_details"] = details
    if usage is not None and usage.reasoning_tokens is not None:
        body["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return body


def _call(index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"index": index, "id": call_id, "type": "function", "function": function}


def _call_of(item: Item) -> tuple[str, str, str] | None:
    """A call's id, name and arguments text, for a ToolCall or a malformed one."""
    if isinstance(item, ToolCall):
        return item.id, item.name, item.arguments_json()
    if isinstance(item, ToolCallError):
        return item.tool_call_id or "", item.name or "", item.raw
    return None


class ChatStream:
    """Writes one served turn as ``chat.completion.chunk`` frames.

    Call :meth:`open` once, :meth:`write` for each item of the turn, then
    :meth:`close` with how it ended, or :meth:`fail` with the error that ended it.
    Each returns the bytes to send (possibly none). ``include_usage`` adds the usage
    chunk (``stream_options.include_usage``).
    """

    def __init__(
        self,
        model: str,
        *,
        include_usage: bool = False,
        completion_id: str | None = None,
        created: int | None = None,
    ) -> None:
        self.model = model
        self.include_usage = include_usage
        self.id = completion_id or new_completion_id()
        self.created = int(time.time()) if created is None else created
        self.calls = 0
        self.done = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }

    def open(self, input_tokens: int | None = None) -> bytes:
        """The first chunk: the assistant's role and empty content. (``input_tokens``
        is for the wires that announce it; this one does at the end.)"""
        return sse(self._chunk({"role": "assistant", "content": ""}))

    def write(self, item: Item) -> bytes:
        """The frames of one item: text, reasoning, or a tool call (whole)."""
        if self.done:
            return b""
        if isinstance(item, Text):
            return sse(self._chunk({"content": item.text})) if item.text else b""
        if isinstance(item, Thinking):
            if not item.text or item.redacted:
                return b""
            return sse(self._chunk(dict.fromkeys(REASONING_KEYS, item.text)))
        call = _call_of(item)
        if call is None:
            return b""
        call_id, name, arguments = call
        index, self.calls = self.calls, self.calls + 1
        head = sse(self._chunk({"tool_calls": [_call(index, call_id, name, "")]}))
        fragment = {"index": index, "function": {"arguments": arguments}}
        return head + sse(self._chunk({"tool_calls": [fragment]}))

    def close(self, ending: Ending) -> bytes:
        """The finish chunk, the usage chunk when asked for, and ``[DONE]``."""
        if self.done:
            return b""
        self.done = True
        finish = finish_kind(ending.finish_reason, self.calls > 0)
        out = sse(self._chunk({}, finish))
        usage = usage_body(ending) if self.include_usage else None
        if usage is not None:
            out += sse({**self._chunk({}), "choices": [], "usage": usage})
        return out + _DONE

    def fail(self, error: BaseException) -> bytes:
        """The error that ended the turn, as the wire sends one inside a stream, and
        ``[DONE]``."""
        if self.done:
            return b""
        self.done = True
        return sse(error_frame(error)) + _DONE


def error_frame(error: BaseException, status: int | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` for ``error``."""
    status, kind = error_kind(error, status)
    message = error.message if isinstance(error, CucaError) else str(error)
    body = {"message": message, "type": ERROR_TYPES[kind], "param": None, "code": status}
    return {"error": body}


def error_body(error: BaseException, status: int | None = None) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of an error answered before any byte of a turn."""
    return error_kind(error, status)[0], error_frame(error, status)


def completion(
    items: Iterable[Item],
    ending: Ending,
    model: str,
    *,
    completion_id: str | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    """One ``chat.completion`` object for a whole turn: the text, the reasoning (under
    both keys) and the tool calls of one assistant message, the finish reason and the
    usage."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, Text):
            text.append(item.text)
        elif isinstance(item, Thinking) and not item.redacted:
            reasoning.append(item.text)
        elif (call := _call_of(item)) is not None:
            call_id, name, arguments = call
            calls.append(
                {k: v for k, v in _call(0, call_id, name, arguments).items() if k != "index"}
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if any(reasoning):
        message.update(dict.fromkeys(REASONING_KEYS, "".join(reasoning)))
    if calls:
        message["tool_calls"] = calls
    if message["content"] is None and not calls:
        message["content"] = ""
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_kind(ending.finish_reason, bool(calls)),
    }
    return {
        "id": completion_id or new_completion_id(),
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [choice],
        "usage": usage_body(ending),
    }


def models_body(models: Sequence[str], created: int = 0, owner: str = "cuca") -> dict[str, Any]:
    """``GET /v1/models``: ``{"object": "list", "data": [{"id", "object", ...}]}``."""
    data = [{"id": m, "object": "model", "created": created, "owned_by": owner} for m in models]
    return {"object": "list", "data": data}
