"""Anthropic Messages: Anthropic itself and DeepSeek's Anthropic-compatible bridge.

One wire shape, two dialects. Both post ``{"model", "max_tokens", "messages", ...}`` to a
``/messages`` route and read the same event stream (see :mod:`.decode`). The
bridge differs in four ways: the model name is rewritten, prompt caching is off, the
thinking control is a plain on/off switch, and thinking blocks are replayed without a
signature when DeepSeek sent none.

Replay rule: an assistant turn's thinking goes back to the provider that issued it, in
its original order, and to no one else. Thinking items a caller kept as separate deltas
(``Thinking("a")``, ``Thinking("b")``, ``Thinking("", signature=s)``) are joined into
the one signed block they came from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from cuca.batch_wire import BatchWire
from cuca.errors import ConfigurationError, ProviderError
from cuca.turn import RateLimitHint
from cuca.types import (
    AnthropicThinkingParams,
    Block,
    ImageBase64,
    MessageRole,
    OutputSchema,
    PromptCache,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    TokenCount,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

from ..base import ClientSettings, HttpRequest, ProviderAdapter, Send, StreamDecoder, refuse
from ..controls import forced, stop_sequences, tool_choice
from ..decoding import Overflow
from ..headers import read_hint
from ..table import missing_key_hint
from ..whole_response import for_request
from .decode import AnthropicDecoder
from .overflow import anthropic_overflow
from .ratelimit import ANTHROPIC_HEADERS
from .whole import anthropic_events

__all__ = [
    "ANTHROPIC_VERSION",
    "AnthropicAdapter",
    "AnthropicConfig",
    "deepseek_bridge_model",
    "encode_body",
    "make_anthropic",
    "make_deepseek_bridge",
]

DEEPSEEK_BRIDGE_URL = "https://api.deepseek.com/anthropic"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024
"""Seed 001: "That adapter sends 1024 when the field is unset". With thinking on, these
1024 tokens are left for the answer after the thinking budget."""

BUDGET_TOKENS = {
    ThinkingEffort.MINIMAL: 1024,
    ThinkingEffort.LOW: 2048,
    ThinkingEffort.MEDIUM: 8192,
    ThinkingEffort.HIGH: 16384,
    ThinkingEffort.XHIGH: 16384,
}
ADAPTIVE_EFFORT = {
    ThinkingEffort.MINIMAL: "low",
    ThinkingEffort.LOW: "low",
    ThinkingEffort.MEDIUM: "medium",
    ThinkingEffort.HIGH: "high",
    ThinkingEffort.XHIGH: "xhigh",
}
EPHEMERAL = {"type": "ephemeral"}

MAX_TEMPERATURE = 1.0
"""Anthropic's documented temperature range is 0 to 1 (OpenAI's and Gemini's reach 2)."""
MIN_THINKING_TOP_P = 0.95
"""With thinking on, Anthropic takes ``top_p`` from 0.95 to 1 only."""


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _hide(value: str | None) -> str:
    return "None" if value is None else "'<redacted>'"


@attrs.frozen
class AnthropicConfig:
    """Settings only the Anthropic adapter reads, passed as the client's
    ``provider_config``.

    ``bearer_token`` replaces the API key: it is sent as ``Authorization: Bearer`` and
    no ``x-api-key`` goes out. ``betas`` are sent as one ``anthropic-beta`` header
    (``("interleaved-thinking-2025-05-14",)`` lets Claude 4 models think between tool
    calls). ``adaptive_thinking`` chooses how a unified ``ThinkingEffort`` is sent:
    ``False`` (the default) as a ``budget_tokens`` budget, ``True`` as adaptive thinking
    with an ``output_config.effort`` (for the models that take adaptive thinking).
    ``repr`` never shows the token.
    """

    bearer_token: str | None = attrs.field(default=None, repr=_hide)
    betas: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    adaptive_thinking: bool = False


@attrs.frozen
class _Dialect:
    """What differs between Anthropic and DeepSeek's bridge."""

    endpoint: ProviderEndpoint
    name: str
    missing_key: str
    bridge: bool


ANTHROPIC = _Dialect(
    ProviderEndpoint.ANTHROPIC,
    "anthropic",
    f"anthropic requires an api key: {missing_key_hint('anthropic')}",
    bridge=False,
)
DEEPSEEK_BRIDGE = _Dialect(
    ProviderEndpoint.DEEPSEEK,
    "deepseek",
    f"deepseek anthropic bridge requires an api key: {missing_key_hint('deepseek')}",
    bridge=True,
)


def make_anthropic(settings: ClientSettings) -> AnthropicAdapter:
    """The adapter for ``ProviderEndpoint.ANTHROPIC``.

    A key (or bearer token) is required for Anthropic's own URL. With a ``base_url`` set
    it is optional: a local gateway (LocalAI, a proxy) may serve ``/messages`` without
    one, and then no auth header is sent.
    """
    config = settings.provider_config  # the registry checked its type
    if config is None:
        config = AnthropicConfig()
    base = settings.url()
    headers = {"anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
    if config.betas:
        headers["anthropic-beta"] = ",".join(config.betas)
    if config.bearer_token:
        headers["authorization"] = f"Bearer {config.bearer_token}"
    elif settings.api_key:
        headers["x-api-key"] = settings.api_key
    return AnthropicAdapter(
        ANTHROPIC,
        f"{base}/messages",
        headers,
        key_required=not settings.base_url,
        adaptive=config.adaptive_thinking,
    )


def make_deepseek_bridge(settings: ClientSettings) -> AnthropicAdapter:
    """The adapter for DeepSeek's Anthropic-compatible route (a base URL ending in
    ``/anthropic``): posts to ``{base}/v1/messages``, as Anthropic's SDK does there."""
    base = (settings.base_url or DEEPSEEK_BRIDGE_URL).rstrip("/")
    url = f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"
    headers = {"anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
    if settings.api_key:
        headers["x-api-key"] = settings.api_key
    return AnthropicAdapter(DEEPSEEK_BRIDGE, url, headers)


def deepseek_bridge_model(model: str) -> str:
    """The model DeepSeek's bridge serves for ``model``: ``claude-opus*`` becomes
    ``deepseek-v4-pro``, ``claude-sonnet*`` and ``claude-haiku*`` become
    ``deepseek-v4-flash``; any other name is sent as given."""
    lowered = model.lower()
    if lowered.startswith("claude-opus"):
        return "deepseek-v4-pro"
    if lowered.startswith(("claude-sonnet", "claude-haiku")):
        return "deepseek-v4-flash"
    return model


class AnthropicAdapter(ProviderAdapter):
    """Encodes requests for, and decodes streams of, the Anthropic Messages API."""

    def __init__(
        self,
        dialect: _Dialect,
        url: str,
        headers: Mapping[str, str],
        *,
        key_required: bool = True,
        adaptive: bool = False,
    ) -> None:
        self.endpoint = dialect.endpoint
        self.dialect = dialect
        self.url = url
        self.headers = dict(headers)
        self.key_required = key_required
        self.adaptive = adaptive

    def __repr__(self) -> str:
        return f"AnthropicAdapter({self.dialect.name!r}, {self.url!r})"

    def encode(self, request: UnifiedRequest) -> HttpRequest:
        keyed = "x-api-key" in self.headers or "authorization" in self.headers
        if self.key_required and not keyed:
            raise ConfigurationError(self.dialect.missing_key)
        body = encode_body(self.dialect, request, adaptive=self.adaptive)
        return HttpRequest(self.url, self.headers, body)

    def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
        decoder = AnthropicDecoder(self.dialect.endpoint, self.dialect.name)
        return for_request(request, decoder, anthropic_events, self.dialect.name)

    def error_message(self, status: int, body: str) -> str | None:
        return error_message(body)

    def rate_limits(self, headers: Sequence[tuple[str, str]]) -> RateLimitHint | None:
        """Anthropic's ``anthropic-ratelimit-*`` headers and ``Retry-After`` (:mod:`.ratelimit`)."""
        return read_hint(headers, (ANTHROPIC_HEADERS,))

    def overflow(self, status: int, body: str) -> Overflow | None:
        return anthropic_overflow(status, body)

    def batch_wire(self) -> BatchWire:
        """Anthropic's Message Batches (:mod:`.batch`); DeepSeek's bridge has none."""
        if self.dialect.bridge:
            return super().batch_wire()
        from .batch import MessageBatches

        return MessageBatches(self, f"{self.url}/batches", self.headers)

    async def count_tokens(self, request: UnifiedRequest, send: Send) -> TokenCount:
        """Exact: ``POST /v1/messages/count_tokens`` over the body the turn would send,
        less the fields that route refuses (``max_tokens``, ``stream``...)."""
        encoded = self.encode(request)
        body = {k: v for k, v in encoded.body.items() if k in _COUNTED_FIELDS}
        answer = await send(HttpRequest(f"{self.url}/count_tokens", encoded.headers, body))
        tokens = answer.get("input_tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, int):
            raise ProviderError(self.dialect.name, f"count_tokens answered {answer!r:.200}")
        return TokenCount(tokens, exact=True, method="anthropic count_tokens")


def encode_body(dialect: _Dialect, request: UnifiedRequest, *, adaptive: bool) -> dict[str, Any]:
    """The JSON body of one Messages request (``adaptive``: a unified effort is sent as
    adaptive thinking, :class:`AnthropicConfig`'s ``adaptive_thinking``)."""
    bridge = dialect.bridge
    max_tokens = _max_tokens(request)
    body: dict[str, Any] = {
        "model": deepseek_bridge_model(request.model) if bridge else request.model,
        "max_tokens": max_tokens,
    }
    cache = None if bridge else request.prompt_cache
    system = _system(request.messages, cache)
    if system is not None:
        body["system"] = system
    body["messages"] = _MessageEncoder(dialect, cache).encode(request.messages)
    if request.tools:
        body["tools"] = _tools(request, cache)
    if request.temperature is not None:
        if request.temperature > MAX_TEMPERATURE:
            raise ConfigurationError(
                f"temperature {request.temperature} is above {MAX_TEMPERATURE:g}, "
                "the most the Messages API takes"
            )
        body["temperature"] = request.temperature
    if bridge:
        refuse(dialect.name, request.output_schema)
        body.update(_bridge_thinking(request.thinking))
    else:
        body.update(_thinking(request.thinking, max_tokens, adaptive=adaptive))
    if request.output_schema is not None:
        output = body.setdefault("output_config", {})
        output["format"] = anthropic_format(request.output_schema)
    body.update(_controls(request, dialect))
    body["stream"] = request.stream
    return body


_COUNTED_FIELDS = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"}
)
"""The fields ``/v1/messages/count_tokens`` takes (Anthropic's API reference)."""


def error_message(body: str) -> str | None:
    """``error.message`` of an Anthropic error body, if the body has one."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else None


# -- request pieces ------------------------------------------------------------------


def _system(messages: Iterable[UnifiedMessage], cache: PromptCache | None) -> Any:
    texts = [m.text() for m in messages if m.role is MessageRole.SYSTEM]
    texts = [t for t in texts if t]
    if not texts:
        return None
    text = "\n".join(texts)
    if cache is not None and cache.system:
        return [{"type": "text", "text": text, "cache_control": dict(EPHEMERAL)}]
    return text


def _tools(request: UnifiedRequest, cache: PromptCache | None) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
        for t in request.tools
    ]
    if cache is not None and cache.tools:
        tools[-1]["cache_control"] = dict(EPHEMERAL)
    return tools


def _controls(request: UnifiedRequest, dialect: _Dialect) -> dict[str, Any]:
    """``stop_sequences``, ``top_p`` and ``tool_choice`` (the Messages API has no seed:
    a request's is dropped). With thinking on, Anthropic takes ``top_p`` from 0.95 to 1
    only and no forced tool use (its extended-thinking page): both refused here."""
    fields: dict[str, Any] = {}
    stop = stop_sequences(request, dialect.name)
    if stop:
        fields["stop_sequences"] = stop
    thinking = not dialect.bridge and request.thinking is not None and request.thinking.enabled
    if request.top_p is not None:
        if thinking and request.top_p < MIN_THINKING_TOP_P:
            raise ConfigurationError(
                f"top_p {request.top_p} is below {MIN_THINKING_TOP_P}, the least the "
                "Messages API takes with thinking on"
            )
        fields["top_p"] = request.top_p
    choice = tool_choice(request)
    if choice is not None:
        if thinking and forced(choice):
            raise ConfigurationError(
                f"tool_choice {str(choice)!r} forces a tool call, which the Messages API "
                "refuses with thinking on: leave tool_choice 'auto', or turn thinking off"
            )
        kind = {"required": "any", "tool": "tool"}.get(choice.mode.value, choice.mode.value)
        fields["tool_choice"] = {"type": kind, **({"name": choice.name} if choice.name else {})}
    return fields


def _implied_budget(config: ThinkingConfig | None) -> int | None:
    """The thinking budget a request implies: its native ``budget_tokens``, else the
    budget column for its effort (MEDIUM when unset); ``None`` with thinking off."""
    if config is None or not config.enabled:
        return None
    params = config.params
    if isinstance(params, AnthropicThinkingParams):
        if params.without_budget:
            return None
        if params.budget_tokens is not None:
            return params.budget_tokens
    return BUDGET_TOKENS[config.effort or ThinkingEffort.MEDIUM]


def _max_tokens(request: UnifiedRequest) -> int:
    """The request's ``max_tokens``; when unset, 1024 (the API requires the key), plus
    the implied thinking budget when thinking is on, so that the seed's 1024 tokens are
    left for the answer instead of refusing the request."""
    if request.max_tokens is not None:
        return request.max_tokens
    return DEFAULT_MAX_TOKENS + (_implied_budget(request.thinking) or 0)


def _thinking(config: ThinkingConfig | None, max_tokens: int, *, adaptive: bool) -> dict[str, Any]:
    """Anthropic's thinking keys: the unified effort as a budget (or, with ``adaptive``,
    as an adaptive effort), or a native override (``budget_tokens``, adaptive
    ``effort``). Disabled sends nothing."""
    if config is None or not config.enabled:
        return {}
    params = config.params if isinstance(config.params, AnthropicThinkingParams) else None
    if params is not None and params.without_budget:  # a gateway's bare opt-in (seed 004)
        return {"thinking": {"type": "enabled"}}
    if params is None and adaptive:
        effort = ADAPTIVE_EFFORT[config.effort or ThinkingEffort.MEDIUM]
        return {"thinking": {"type": "adaptive"}, "output_config": {"effort": effort}}
    keys: dict[str, Any] = {}
    if params is not None and params.effort is not None:
        keys["thinking"] = {"type": "adaptive"}
        keys["output_config"] = {"effort": _adaptive_effort(params.effort)}
    budget = params.budget_tokens if params is not None else None
    if budget is None and "thinking" not in keys:
        budget = _implied_budget(config)
    if budget is not None:
        if max_tokens <= budget:
            raise ConfigurationError(
                f"anthropic thinking budget_tokens ({budget}) must be below max_tokens "
                f"({max_tokens}); raise max_tokens or lower the thinking effort"
            )
        keys["thinking"] = {"type": "enabled", "budget_tokens": budget}
    return keys


def _adaptive_effort(effort: str) -> str:
    """A unified effort name maps through the adaptive table; any other value
    (``"max"``) is Anthropic's own and passes through."""
    try:
        return ADAPTIVE_EFFORT[ThinkingEffort(effort.lower())]
    except ValueError:
        return effort


def _bridge_thinking(config: ThinkingConfig | None) -> dict[str, Any]:
    """DeepSeek's bridge takes an on/off mode and, natively, an adaptive effort."""
    if config is None:
        return {}
    if not config.enabled:
        return {"thinking": {"type": "disabled"}}
    keys: dict[str, Any] = {"thinking": {"type": "enabled"}}
    params = config.params
    if isinstance(params, AnthropicThinkingParams) and params.effort is not None:
        keys["output_config"] = {"effort": _adaptive_effort(params.effort)}
    return keys


class _MessageEncoder:
    """Builds the ``messages`` array: roles, content blocks, tool results merged into
    one user turn, thinking replayed to its issuer, and cache breakpoints."""

    def __init__(self, dialect: _Dialect, cache: PromptCache | None) -> None:
        self.dialect = dialect
        self.cache = cache

    def encode(self, messages: tuple[UnifiedMessage, ...]) -> list[dict[str, Any]]:
        turns: list[dict[str, Any]] = []
        last_block: dict[int, dict[str, Any]] = {}
        previous_role: MessageRole | None = None
        for index, message in enumerate(messages):
            if message.role is MessageRole.SYSTEM:
                continue
            blocks = self._blocks(message)
            if not blocks:
                continue
            if message.role is MessageRole.TOOL and previous_role is MessageRole.TOOL:
                turns[-1]["content"].extend(blocks)
            else:
                role = "assistant" if message.role is MessageRole.ASSISTANT else "user"
                turns.append({"role": role, "content": blocks})
            previous_role = message.role
            last_block[index] = blocks[-1]
        self._mark_cached(messages, last_block)
        return turns

    def _mark_cached(
        self, messages: tuple[UnifiedMessage, ...], last_block: dict[int, dict[str, Any]]
    ) -> None:
        if self.cache is None:
            return
        count = len(messages)
        for index in self.cache.messages:
            if -count <= index < count and (block := last_block.get(index % count)):
                block["cache_control"] = dict(EPHEMERAL)

    def _blocks(self, message: UnifiedMessage) -> list[dict[str, Any]]:
        if message.role is MessageRole.ASSISTANT:
            return self._assistant_blocks(message.content)
        blocks = [b for block in message.content for b in _plain_block(block)]
        if message.role is MessageRole.TOOL and not any(
            isinstance(b, ToolResult) for b in message.content
        ):
            # A Tool message written as plain text answers the call it names.
            result = ToolResult(message.tool_call_id or "", message.text())
            blocks = _plain_block(result)
        return blocks

    def _assistant_blocks(self, content: tuple[Block, ...]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        pending: list[str] = []  # unsigned thinking text waiting for its signature

        def flush() -> None:
            if pending and self.dialect.bridge:
                blocks.append({"type": "thinking", "thinking": "".join(pending)})
            pending.clear()

        for block in content:
            if not isinstance(block, Thinking):
                flush()
                blocks.extend(_plain_block(block))
            elif block.provider != self.dialect.endpoint:
                continue
            elif block.redacted:
                flush()
                if block.signature:
                    blocks.append({"type": "redacted_thinking", "data": block.signature})
            elif block.signature:
                text = "".join(pending) + block.text
                pending.clear()
                blocks.append({"type": "thinking", "thinking": text, "signature": block.signature})
            else:
                pending.append(block.text)
        flush()
        return blocks


def _plain_block(block: Block) -> list[dict[str, Any]]:
    """The wire block for anything but thinking (which only assistant turns replay)."""
    if isinstance(block, Text):
        return [{"type": "text", "text": block.text}] if block.text else []
    if isinstance(block, ImageBase64):
        source = {"type": "base64", "media_type": block.media_type, "data": block.data}
        return [{"type": "image", "source": source}]
    if isinstance(block, ToolCall):
        tool_use = {"type": "tool_use", "id": block.id, "name": block.name}
        return [{**tool_use, "input": block.arguments_object()}]
    if isinstance(block, ToolResult):
        result = {"type": "tool_result", "tool_use_id": block.tool_call_id}
        return [{**result, "content": block.output, "is_error": block.is_error}]
    return []


# -- how this wire asks for an answer that follows a JSON Schema --------------------


def anthropic_format(spec: OutputSchema) -> dict[str, Any]:
    """``output_config.format`` of Anthropic's Messages API."""
    return {"type": "json_schema", "schema": dict(spec.schema)}
