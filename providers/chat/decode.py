"""The ``/chat/completions`` stream decoder and error texts, shared by every server
that speaks the route (see :mod:`.encode` for the request side).

Stream rules, from ``reference/wire.md`` sections 1 to 4, 6 and 11:

- ``delta.content`` is answer text; ``delta.reasoning_content`` and ``delta.reasoning`` are
  both reasoning (servers disagree on the name, vLLM may send both with the same text).
- Tool calls arrive as fragments keyed by ``index``. The id and name may come only with
  the first fragment, or again on every one; arguments may be split anywhere or sent whole
  at the end. Calls are merged by index, and emitted when the choice finishes. Some servers
  send every parallel call on ``index`` 0, each with its own id and name: at one index, a
  fragment with an id the index has not seen, or a name other than its call's (even
  with the same id: a server that gives every call one id), starts a new call, and one
  with an id it has seen goes to that call (vLLM repeats the id on every fragment). The
  same id at two indexes stays two calls.
- Usage arrives on a ``choices: []`` chunk (OpenAI, vLLM, llama.cpp) or on the finish chunk
  (DeepSeek); it is read wherever it appears.
- ``data: {"error": ...}`` is an error inside a 200 stream, of the kind its ``type`` or
  ``code`` says (:func:`.decoding.stream_error`); ``data: [DONE]`` ends it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from cuca.errors import StreamIncomplete
from cuca.stages.sse import SseEvent
from cuca.types import (
    FinishReason,
    PromptCacheUsage,
    ProviderEndpoint,
    Text,
    Thinking,
    TokenUsage,
    TurnSummary,
)

from ..base import Item, StreamDecoder, guarded_feed
from ..controls import finish_fields
from ..decoding import Shape, decode_frame, error_text, finished_call, json_body, stream_error
from .overflow import chat_overflow

__all__ = ["ChatCompletionsDecoder", "chat_error_message"]


# -- errors --------------------------------------------------------------------------


def chat_error_message(body: str) -> str | None:
    """The vendor's message in an error body: ``{"error": {"message": ...}}`` (OpenAI,
    vLLM, DeepSeek, llama.cpp), ``{"error": "..."}`` (LM Studio, old llama.cpp), or a
    top-level ``message`` / ``detail`` (older vLLM, FastAPI validation)."""
    data = json_body(body)
    if not isinstance(data, dict):
        return None
    if data.get("error"):
        return error_text(data["error"])
    for key in ("message", "detail"):
        if isinstance(data.get(key), str):
            return str(data[key])
    return None


# -- the chunk's shape (wire.md 1.2, 2, 3, 4, 6, 11) -----------------------------------


class _Function(Shape):
    name: str | None = None
    # text, or an object from servers that parse it; read by hand, so that any other
    # value is kept as its JSON and shown in a ToolCallError rather than dropped
    arguments: Any = None


class _CallFragment(Shape):
    index: int | None = None  # absent on old Ollama: one call at a time
    id: str | None = None
    function: _Function | None = None


class _Delta(Shape):
    content: str | None = None
    reasoning_content: str | None = None  # DeepSeek, llama.cpp, LM Studio, older vLLM
    reasoning: str | None = None  # vLLM, LM Studio for gpt-oss
    tool_calls: list[_CallFragment] | None = None


class _Choice(Shape):
    index: int | None = None  # absent or null: the first choice
    delta: _Delta | None = None
    finish_reason: str | None = None


class _TokenDetails(Shape):
    reasoning_tokens: int | None = None  # completion_tokens_details
    cached_tokens: int | None = None  # prompt_tokens_details
    cache_write_tokens: int | None = None  # prompt_tokens_details


class _Usage(Shape):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_cache_hit_tokens: int | None = None  # DeepSeek
    prompt_tokens_details: _TokenDetails | None = None
    completion_tokens_details: _TokenDetails | None = None


class _Chunk(Shape):
    """A ``chat.completion.chunk``: choices and usage, or an error object or string."""

    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None


_CHUNK = msgspec.json.Decoder(_Chunk)
_NO_USAGE = _Usage()
_NO_DETAILS = _TokenDetails()
_NO_FUNCTION = _Function()


# -- decoding a response -------------------------------------------------------------


class _PendingCall:
    __slots__ = ("args", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args: list[str] = []

    def other(self, call_id: str | None, name: str | None) -> bool:
        """Whether a fragment with this id and name belongs to another call: an id
        other than this call's, or (without one) a name other than its."""
        if call_id and self.id:
            return call_id != self.id
        return bool(name and self.name and name != self.name)


_NO_INDEX = -1
"""The index of fragments that carry none (old Ollama): sorted before the others."""


def _endpoint(provider: str) -> ProviderEndpoint:
    """The endpoint a provider name stands for; a custom one for a name cuca lacks."""
    if provider in ProviderEndpoint.BUILTIN:
        return ProviderEndpoint(provider)
    return ProviderEndpoint.custom(provider)


CHAT_FINISH: Mapping[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,  # the deprecated functions API
    "content_filter": FinishReason.CONTENT_FILTER,
    "insufficient_system_resource": FinishReason.ERROR,  # DeepSeek
}
"""The chat wire's ``finish_reason`` values (OpenAI, vLLM, LM Studio, DeepSeek,
llama-server); any other is ``OTHER``."""


class ChatCompletionsDecoder(StreamDecoder):
    """Turns ``chat.completion.chunk`` events into blocks (one instance per turn).

    Tool calls are held until their choice reports a ``finish_reason`` (or ``[DONE]``
    arrives) and then emitted in index order. A call whose arguments are not a JSON
    object is yielded as a :class:`~cuca.errors.ToolCallError` and the stream goes on.
    ``endpoint`` tags Thinking blocks (by default, the endpoint ``provider`` names).
    """

    def __init__(self, provider: str, endpoint: ProviderEndpoint | None = None) -> None:
        self.provider = provider
        self.endpoint = endpoint if endpoint is not None else _endpoint(provider)
        self.finished = False
        self._calls: dict[int, list[_PendingCall]] = {}  # by index, in arrival order
        self._usage: TokenUsage | None = None
        self._cache: PromptCacheUsage | None = None
        self._finish_reason: str | None = None
        self._called = False  # a tool call was completed

    @guarded_feed("openai-compatible")
    def feed(self, event: SseEvent) -> list[Item]:
        data = event.data
        if not data:
            return []
        if data.startswith("[DONE]"):
            self.finished = True
            return self._flush_calls()
        chunk = decode_frame(_CHUNK, data, self.provider)
        if chunk.error:
            message = error_text(chunk.error)
            raise stream_error(self.provider, message, chunk.error, data, chat_overflow)
        items: list[Item] = []
        for choice in chunk.choices or ():
            if choice.index:  # only choice 0 is read (absent or null: it is choice 0)
                continue
            delta = choice.delta
            if delta is not None:
                reasoning = delta.reasoning_content or delta.reasoning
                if reasoning:
                    items.append(Thinking(reasoning, provider=self.endpoint))
                if delta.content:
                    items.append(Text(delta.content))
                if delta.tool_calls:
                    for call in delta.tool_calls:
                        self._merge(call)
            if choice.finish_reason:
                self._finish_reason = choice.finish_reason
                items.extend(self._flush_calls())
        if chunk.usage is not None and chunk.usage != _NO_USAGE:
            self._read_usage(chunk.usage)
        return items

    def _merge(self, fragment: _CallFragment) -> None:
        function = fragment.function or _NO_FUNCTION
        pending = self._pending(fragment.index, fragment.id, function.name)
        if fragment.id and not pending.id:
            pending.id = fragment.id
        if function.name and not pending.name:
            pending.name = function.name
        args = function.arguments
        if isinstance(args, str):
            if args:
                pending.args.append(args)
        elif args is not None:
            pending.args = [json.dumps(args)]

    def _pending(self, index: int | None, call_id: str | None, name: str | None) -> _PendingCall:
        """The call a fragment belongs to (see the module docstring): at its index, the
        call with its id, else the latest one unless the fragment is another's."""
        calls = self._calls.setdefault(_NO_INDEX if index is None else index, [])
        if call_id:
            same = next((pending for pending in reversed(calls) if pending.id == call_id), None)
            if same is not None:
                if not (name and same.name and name != same.name):
                    return same
                calls.append(_PendingCall())  # the id again, on another function
                return calls[-1]
        if not calls or calls[-1].other(call_id, name):
            calls.append(_PendingCall())
        return calls[-1]

    def _flush_calls(self) -> list[Item]:
        if not self._calls:
            return []
        ordered = [pending for index in sorted(self._calls) for pending in self._calls[index]]
        self._calls.clear()
        self._called = True
        return [self._complete(n, pending) for n, pending in enumerate(ordered)]

    def _complete(self, position: int, pending: _PendingCall) -> Item:
        raw = "".join(pending.args).strip()
        return finished_call(self.provider, pending.id or f"call_{position}", pending.name, raw)

    def _read_usage(self, usage: _Usage) -> None:
        completion = usage.completion_tokens_details or _NO_DETAILS
        self._usage = TokenUsage(
            usage.prompt_tokens or 0, usage.completion_tokens or 0, completion.reasoning_tokens
        )
        details = usage.prompt_tokens_details or _NO_DETAILS
        read = usage.prompt_cache_hit_tokens
        if read is None:
            read = details.cached_tokens
        write = details.cache_write_tokens
        if read is not None or write is not None:
            self._cache = PromptCacheUsage(read or 0, write or 0)

    def close(self) -> list[Item]:
        if self.finished or self._finish_reason is not None:
            return self._flush_calls()
        raise StreamIncomplete("stream ended before the turn was complete")

    def summary(self) -> TurnSummary:
        finish = finish_fields(self._finish_reason, CHAT_FINISH, called=self._called)
        return TurnSummary(self._usage, self._cache, **finish)
