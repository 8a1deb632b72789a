"""The ``/chat/completions`` wire shape: OpenAI, vLLM, LM Studio, and the servers that
copy it (DeepSeek's native route and llama.cpp's chat route build on this module).

One adapter serves them all; what differs between servers is a :class:`Dialect`, a small
frozen record of facts (how thinking is requested, which token-limit key the server
reads...). A server of the provider table gets its dialect from its entry's ``chat``
(:mod:`cuca.providers.table`), so a server whose differences are all dialect facts is a
table entry and no code here. A server that needs code of its own builds on this module
instead: DeepSeek's thinking and reasoning echo (:mod:`.deepseek`), llama.cpp's routes
(:mod:`cuca.providers.llamacpp.encode`). The adapter factory is :mod:`.family` and the
stream decoder :mod:`.decode`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

import attrs

from cuca.batch_wire import BatchWire
from cuca.errors import ConfigurationError
from cuca.turn import RateLimitHint
from cuca.types import (
    ImageBase64,
    MessageRole,
    OpenAiThinkingParams,
    OutputSchema,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    TokenCount,
    ToolCall,
    ToolChoiceMode,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)
from cuca.vectors import EmbeddingRoute

from ..base import HttpRequest, ProviderAdapter, Send, StreamDecoder
from ..controls import stop_sequences, tool_choice
from ..decoding import Overflow, error_text
from ..headers import read_hint
from ..table import endpoint_info, missing_key_hint
from ..whole_response import for_request
from .decode import ChatCompletionsDecoder, chat_error_message
from .overflow import chat_overflow
from .ratelimit import OPENAI_HEADERS
from .whole import chat_events

__all__ = [
    "ChatCompletionsDecoder",
    "Dialect",
    "OpenAiCompatAdapter",
    "bearer_headers",
    "chat_error_message",
    "dialect_of",
    "encode_body",
    "encode_messages",
    "error_text",
    "reasoning_effort",
    "require_key",
]

REASONING_EFFORT: Mapping[ThinkingEffort, str] = {
    ThinkingEffort.MINIMAL: "minimal",
    ThinkingEffort.LOW: "low",
    ThinkingEffort.MEDIUM: "medium",
    ThinkingEffort.HIGH: "high",
    ThinkingEffort.XHIGH: "high",
}


@attrs.frozen
class Dialect:
    """What one ``/chat/completions`` server does differently.

    ``thinking`` is ``"effort"`` (send ``reasoning_effort``) or ``"mode"`` (DeepSeek's
    ``{"thinking": {"type": ...}}``). ``echo_reasoning`` says which assistant turns carry
    their Thinking back as ``reasoning_content``: ``"always"``, or ``"tool_turns"`` only.
    ``key_host`` is the vendor host that refuses anonymous calls: with no key, a request
    to it fails before any I/O; any other host (a proxy, a local server) is sent no
    auth header. ``structured`` is how an output schema is asked for: ``"json_schema"``
    (``response_format`` with the schema) or ``"json_object"`` (JSON mode, the schema in
    a system message). ``closes_after_stream`` says the server closes the connection
    once a streamed answer ends without announcing it (``Connection: close`` is never
    sent back): a streamed request then asks for the close itself, so the connection
    never goes back to the pool, where the next turn would race the server's close.
    ``max_stop`` is the most stop sequences the server takes (more is refused before
    sending); ``seed`` whether it takes a seed (without, a request's seed is dropped);
    ``named_tool_choice`` whether ``tool_choice`` takes a named function (without, a
    named tool is sent as ``"required"`` with only that tool).
    """

    endpoint: ProviderEndpoint
    thinking: Literal["effort", "mode"] = "effort"
    max_tokens_field: str = "max_tokens"
    echo_reasoning: Literal["always", "tool_turns"] = "always"
    key_host: str | None = None
    structured: Literal["json_schema", "json_object"] = "json_schema"
    closes_after_stream: bool = False
    max_stop: int | None = None
    seed: bool = True
    named_tool_choice: bool = True

    @property
    def name(self) -> str:
        return str(self.endpoint)


def dialect_of(endpoint: ProviderEndpoint) -> Dialect:
    """The dialect of an OpenAI-compatible server, from its provider table entry's
    ``chat`` (:mod:`cuca.providers.table`)."""
    info = endpoint_info(endpoint.kind)
    if info is None or info.chat is None:
        raise ConfigurationError(f"{endpoint} is not an OpenAI-compatible server of the table")
    return Dialect(endpoint, **info.chat)


# -- request -------------------------------------------------------------------------


def reasoning_effort(thinking: ThinkingConfig | None) -> str | None:
    """The ``reasoning_effort`` for ``thinking``: a native override wins, an unset or
    disabled config sends none."""
    if thinking is None or not thinking.enabled:
        return None
    if isinstance(thinking.params, OpenAiThinkingParams):
        return thinking.params.reasoning_effort
    if thinking.effort is None:
        return None
    return REASONING_EFFORT[thinking.effort]


def _user_content(message: UnifiedMessage) -> str | list[dict[str, Any]]:
    if not any(isinstance(b, ImageBase64) for b in message.content):
        return message.text()
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ImageBase64):
            url = f"data:{block.media_type};base64,{block.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(block, Text):
            parts.append({"type": "text", "text": block.text})
    return parts


def _tool_messages(message: UnifiedMessage) -> list[dict[str, Any]]:
    results = [b for b in message.content if isinstance(b, ToolResult)]
    if not results and message.role is MessageRole.TOOL:
        return [{"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text()}]
    return [
        {
            "role": "tool",
            "tool_call_id": r.tool_call_id or message.tool_call_id,
            "content": r.output,
        }
        for r in results
    ]


def _assistant(message: UnifiedMessage, echo: str) -> dict[str, Any]:
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    text = "".join(b.text for b in message.content if isinstance(b, Text))
    out: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    reasoning = "".join(
        b.text for b in message.content if isinstance(b, Thinking) and not b.redacted
    )
    if reasoning and (echo == "always" or calls):
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = [_encode_call(c) for c in calls]
    return out


def _encode_call(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments_json()
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def encode_messages(
    messages: tuple[UnifiedMessage, ...], echo_reasoning: str = "always"
) -> list[dict[str, Any]]:
    """The ``messages`` array for a conversation.

    Text blocks of system and user messages are joined with newlines; an assistant's
    blocks are stream deltas and are joined as they are. Each ToolResult becomes its
    own ``role: "tool"`` message, as the wire has one per call id.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role is MessageRole.SYSTEM:
            out.append({"role": "system", "content": message.text()})
        elif message.role is MessageRole.ASSISTANT:
            out.append(_assistant(message, echo_reasoning))
        else:
            out.extend(_tool_messages(message))
            if message.role is MessageRole.USER and _has_user_content(message):
                out.append({"role": "user", "content": _user_content(message)})
    return out


def _has_user_content(message: UnifiedMessage) -> bool:
    return any(isinstance(b, (Text, ImageBase64)) for b in message.content) or not message.content


def _encode_tools(request: UnifiedRequest) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.input_schema),
            },
        }
        for tool in request.tools
    ]


def _sampling_fields(dialect: Dialect, request: UnifiedRequest) -> dict[str, Any]:
    """``stop`` (at most the dialect's ``max_stop``), ``seed`` (where the server takes
    one) and ``top_p``, each only when the request sets it."""
    fields: dict[str, Any] = {}
    stop = stop_sequences(request, dialect.name, dialect.max_stop)
    if stop:
        fields["stop"] = stop
    if request.seed is not None and dialect.seed:
        fields["seed"] = request.seed
    if request.top_p is not None:
        fields["top_p"] = request.top_p
    return fields


def _tool_choice_fields(
    dialect: Dialect, request: UnifiedRequest, body: dict[str, Any]
) -> dict[str, Any]:
    """``tool_choice``: a mode's string, or the named function. A server that takes no
    named function gets ``"required"``, and ``body``'s tools are cut to that one."""
    choice = tool_choice(request)
    if choice is None:
        return {}
    if choice.mode is not ToolChoiceMode.TOOL:
        return {"tool_choice": choice.mode.value}
    if dialect.named_tool_choice:
        return {"tool_choice": {"type": "function", "function": {"name": choice.name}}}
    body["tools"] = [t for t in body["tools"] if t["function"]["name"] == choice.name]
    return {"tool_choice": "required"}


def _thinking_fields(dialect: Dialect, thinking: ThinkingConfig | None) -> dict[str, Any]:
    if dialect.thinking == "mode":
        if thinking is None:
            return {}
        return {"thinking": {"type": "enabled" if thinking.enabled else "disabled"}}
    effort = reasoning_effort(thinking)
    return {} if effort is None else {"reasoning_effort": effort}


def encode_body(dialect: Dialect, request: UnifiedRequest, model: str) -> dict[str, Any]:
    """The JSON body of one ``/chat/completions`` request (streamed unless
    ``request.stream`` is false)."""
    messages = encode_messages(request.messages, dialect.echo_reasoning)
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": request.stream}
    if request.stream:
        body["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body[dialect.max_tokens_field] = request.max_tokens
    body.update(_thinking_fields(dialect, request.thinking))
    body.update(_sampling_fields(dialect, request))
    if request.tools:
        body["tools"] = _encode_tools(request)
    body.update(_tool_choice_fields(dialect, request, body))
    spec = request.output_schema
    if spec is not None and dialect.structured == "json_object":
        lead = next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
        messages.insert(lead, {"role": "system", "content": json_object_instruction(spec)})
        body["response_format"] = {"type": "json_object"}
    elif spec is not None:
        body["response_format"] = chat_response_format(spec)
    return body


def require_key(dialect: Dialect, url: str, api_key: str | None) -> None:
    """Refuse, before any I/O, to call the vendor's own host without a key."""
    key_host = dialect.key_host
    if api_key is None and key_host and urlsplit(url).hostname == key_host:
        hint = missing_key_hint(dialect.endpoint.kind)
        raise ConfigurationError(f"{dialect.name} requires an API key at {key_host}: {hint}")


def bearer_headers(api_key: str | None, stream: bool = True, close: bool = False) -> dict[str, str]:
    """JSON-in, event-stream-out headers (JSON out when not ``stream``), with a bearer
    token only when a key is set, and ``Connection: close`` on a stream when ``close``
    (a server whose :attr:`Dialect.closes_after_stream`)."""
    accept = "text/event-stream" if stream else "application/json"
    headers = {"content-type": "application/json", "accept": accept}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    if close and stream:
        headers["connection"] = "close"
    return headers


class OpenAiCompatAdapter(ProviderAdapter):
    """Speaks ``POST {base_url}/chat/completions`` in one server's :class:`Dialect`.

    ``model`` overrides the request's model when non-empty (llama.cpp's config does).
    ``route`` is the path after the base URL (the Responses adapter changes it).
    """

    route = "chat/completions"

    def __init__(
        self, dialect: Dialect, base_url: str, api_key: str | None = None, model: str = ""
    ) -> None:
        self.endpoint = dialect.endpoint
        self.dialect = dialect
        self.url = f"{base_url.rstrip('/')}/{self.route}"
        self._api_key = api_key or None
        self._model = model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dialect.name}, url={self.url!r})"

    def encode(self, request: UnifiedRequest) -> HttpRequest:
        require_key(self.dialect, self.url, self._api_key)
        body = encode_body(self.dialect, request, self._model or request.model)
        close = self.dialect.closes_after_stream
        return HttpRequest(self.url, bearer_headers(self._api_key, request.stream, close), body)

    def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
        decoder = ChatCompletionsDecoder(self.dialect.name, self.dialect.endpoint)
        return for_request(request, decoder, chat_events, self.dialect.name)

    def error_message(self, status: int, body: str) -> str | None:
        return chat_error_message(body)

    def rate_limits(self, headers: Sequence[tuple[str, str]]) -> RateLimitHint | None:
        """OpenAI-style ``x-ratelimit-*`` headers and ``Retry-After`` (:mod:`.ratelimit`)."""
        return read_hint(headers, (OPENAI_HEADERS,))

    def overflow(self, status: int, body: str) -> Overflow | None:
        return chat_overflow(status, body)

    def batch_wire(self) -> BatchWire:
        """OpenAI's Batch API (:mod:`.batch`); the other servers of this wire have none."""
        if self.endpoint != ProviderEndpoint.OPENAI:
            return super().batch_wire()
        from .batch import ChatBatch

        auth = bearer_headers(self._api_key, stream=False)
        del auth["content-type"]  # each call sets its own
        base = self.url.removesuffix(f"/{self.route}")
        return ChatBatch(self, base, self.route, auth, self.dialect.name)

    def embedding_route(self) -> EmbeddingRoute:
        """``POST {base_url}/embeddings`` (:mod:`.embeddings`); DeepSeek has none (its
        API lists chat, FIM and models only)."""
        if self.endpoint == ProviderEndpoint.DEEPSEEK:
            return super().embedding_route()
        from .embeddings import ChatEmbeddings

        require_key(self.dialect, self.url, self._api_key)
        return ChatEmbeddings(
            self.url.removesuffix(f"/{self.route}"),
            bearer_headers(self._api_key, stream=False),
            self.dialect.name,
            refuses_empty=self.endpoint == ProviderEndpoint.OPENAI,
            model=self._model,
        )

    async def count_tokens(self, request: UnifiedRequest, send: Send) -> TokenCount:
        """An estimate: tiktoken over the body the turn would send (see
        :mod:`~cuca.providers.chat.estimate`); nothing is sent."""
        from .estimate import estimate_body

        body = self.encode(request).body
        tokens, encoding = estimate_body(body, str(body.get("model") or request.model))
        return TokenCount(tokens, exact=False, method=f"tiktoken {encoding}")


# -- how this wire asks for an answer that follows a JSON Schema --------------------


def chat_response_format(spec: OutputSchema) -> dict[str, Any]:
    """``response_format`` of ``/chat/completions`` with a JSON Schema."""
    schema = {"name": spec.name, "schema": dict(spec.schema), "strict": spec.strict}
    return {"type": "json_schema", "json_schema": schema}


def json_object_instruction(spec: OutputSchema) -> str:
    """The system text that carries the schema on a ``json_object``-only server."""
    schema = json.dumps(dict(spec.schema), ensure_ascii=False)
    return (
        f"Answer with one JSON object only (no prose, no code fence), named {spec.name}, "
        f"that validates against this JSON Schema: {schema}"
    )
