"""llama.cpp's ``llama-server``: the OpenAI-compatible chat route or the native
``/completion`` route.

The chat route is the ``/chat/completions`` adapter of :mod:`cuca.providers.chat.encode`, pointed at
``{base}/v1``. The completion route is its own small protocol: one prompt string built
with ``### User:`` / ``### Assistant:`` markers, and frames ``{"content": ..., "stop": ...}``
(``reference/wire.md`` section 7).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs
import msgspec

from cuca.errors import ConfigurationError, ProviderError
from cuca.stages.sse import SseEvent
from cuca.types import (
    FinishReason,
    MessageRole,
    ModelInfo,
    ProviderEndpoint,
    Text,
    TokenCount,
    TokenUsage,
    TurnSummary,
    UnifiedRequest,
)
from cuca.vectors import EmbeddingRoute

from ..base import (
    JSON_BODY,
    ClientSettings,
    HttpRequest,
    Item,
    ProviderAdapter,
    Send,
    StreamDecoder,
    guarded_feed,
)
from ..chat.config import OpenAiApi, OpenAiConfig
from ..chat.decode import chat_error_message
from ..chat.encode import Dialect, OpenAiCompatAdapter, bearer_headers
from ..chat.overflow import chat_overflow
from ..controls import finish_fields, forced
from ..decoding import Overflow, Shape, decode_frame, error_text, stream_error
from ..whole_response import WholeResponseDecoder
from .whole import completion_events

__all__ = [
    "CompletionDecoder",
    "LlamaChatAdapter",
    "LlamaCompletionAdapter",
    "LlamaCppConfig",
    "LlamaRoute",
    "completion_prompt",
    "make_llama_cpp",
]

# llama-server ends every streamed answer by closing the connection, unannounced (its
# chunk provider returns false after the last chunk, which cpp-httplib takes for a
# failed write); see docs/providers/llama-cpp.md
LLAMA_CPP = Dialect(
    ProviderEndpoint.LLAMA_CPP,
    closes_after_stream=True,
    named_tool_choice=False,  # llama-server reads a tool_choice object as "auto"
)
DEFAULT_N_PREDICT = 128
_PROVIDER = "llama_cpp"


class LlamaRoute(enum.Enum):
    """Which llama-server route a client posts to."""

    CHAT = "chat"
    """``/v1/chat/completions``: messages, tools, reasoning and usage (the default)."""
    COMPLETION = "completion"
    """``/completion``: one prompt string in, raw text out; no tools, no reasoning."""
    RESPONSES = "responses"
    """``/v1/responses``: OpenAI's Responses API, as llama-server serves it."""


@attrs.frozen
class LlamaCppConfig:
    """How to reach a llama-server and which route to use.

    ``base_url`` and ``api_key`` win over the client's own. ``model`` replaces the
    request's model when non-empty. ``n_threads``, ``n_gpu_layers`` and ``flash_attn``
    are sent on the completion route only (when set, and when true for ``flash_attn``).
    """

    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    model: str = ""
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    flash_attn: bool = False
    route: LlamaRoute = LlamaRoute.CHAT


def _base_url(config: LlamaCppConfig, settings: ClientSettings) -> str:
    return config.base_url.rstrip("/") if config.base_url else settings.url()


def make_llama_cpp(settings: ClientSettings) -> ProviderAdapter:
    """The adapter for the route ``settings.provider_config`` selects (chat by default);
    an ``OpenAiConfig`` picks the chat or Responses route the same way."""
    config = settings.provider_config
    if config is None:
        config = LlamaCppConfig()
    elif isinstance(config, OpenAiConfig):
        responses = config.api is OpenAiApi.RESPONSES
        config = LlamaCppConfig(route=LlamaRoute.RESPONSES if responses else LlamaRoute.CHAT)
    elif not isinstance(config, LlamaCppConfig):
        raise ConfigurationError(f"llama_cpp takes a LlamaCppConfig, not {type(config).__name__}")
    base = _base_url(config, settings)
    api_key = config.api_key or settings.api_key
    if config.route is LlamaRoute.COMPLETION:
        return LlamaCompletionAdapter(f"{base}/completion", api_key, config)
    chat_base = base if base.endswith("/v1") else f"{base}/v1"
    if config.route is LlamaRoute.RESPONSES:
        from ..responses.encode import ResponsesAdapter

        return ResponsesAdapter(LLAMA_CPP, chat_base, api_key, model=config.model)
    return LlamaChatAdapter(LLAMA_CPP, chat_base, api_key, model=config.model)


class LlamaChatAdapter(OpenAiCompatAdapter):
    """llama-server's ``/v1/chat/completions``, which can also count exactly and say
    its window: ``/apply-template`` renders the very body a turn sends with the
    server's template, ``/tokenize`` counts it, ``/props`` holds ``n_ctx``."""

    @property
    def root(self) -> str:
        """The server's URL, without ``/v1/chat/completions``."""
        return self.url.removesuffix(f"/{self.route}").removesuffix("/v1")

    async def count_tokens(self, request: UnifiedRequest, send: Send) -> TokenCount:
        encoded = self.encode(request)
        body = {k: v for k, v in encoded.body.items() if k not in ("stream", "stream_options")}
        rendered = await send(HttpRequest(f"{self.root}/apply-template", encoded.headers, body))
        prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        if not isinstance(prompt, str):
            raise ProviderError(_PROVIDER, f"/apply-template answered {rendered!r:.200}")
        # as the chat route tokenizes: special tokens added and parsed
        ask = {"content": prompt, "add_special": True, "parse_special": True}
        counted = await send(HttpRequest(f"{self.root}/tokenize", encoded.headers, ask))
        tokens = counted.get("tokens") if isinstance(counted, dict) else None
        if not isinstance(tokens, list):
            raise ProviderError(_PROVIDER, f"/tokenize answered {counted!r:.200}")
        return TokenCount(len(tokens), exact=True, method="llama-server /tokenize")

    async def model_info(self, model: str, send: Send) -> ModelInfo | None:
        headers = bearer_headers(self._api_key, stream=False)
        props = await send(HttpRequest(f"{self.root}/props", headers, method="GET"))
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        listed = await send(HttpRequest(f"{self.root}/v1/models", headers, method="GET"))
        return ModelInfo(
            model=model,
            context_window=n_ctx if isinstance(n_ctx, int) else None,
            trained_context=_trained_context(listed),
            source="llama-server /props",
        )


def _trained_context(listed: Any) -> int | None:
    """``n_ctx_train`` from the ``meta`` of ``/v1/models``' first model, if there."""
    data = listed.get("data") if isinstance(listed, dict) else None
    first = data[0] if isinstance(data, list) and data else None
    meta = first.get("meta") if isinstance(first, dict) else None
    value = meta.get("n_ctx_train") if isinstance(meta, dict) else None
    return value if isinstance(value, int) else None


# -- the /completion route -----------------------------------------------------------


def completion_prompt(request: UnifiedRequest) -> str:
    """The conversation as one prompt string.

    System text comes first as bare context, wherever the system messages stand in the
    conversation (seed 002); user and assistant turns follow, each on
    its own line after a ``### User:`` or ``### Assistant:`` marker. Only Text blocks
    count, and Tool messages are skipped. The prompt ends with an open ``### Assistant:``
    marker, or continues the last assistant turn when the conversation ends with one.
    """
    system = [m.text() for m in request.messages if m.role is MessageRole.SYSTEM]
    lines: list[str] = system
    for message in request.messages:
        if message.role is MessageRole.USER:
            lines.append(f"### User: {message.text()}")
        elif message.role is MessageRole.ASSISTANT:
            text = "".join(b.text for b in message.content if isinstance(b, Text))
            lines.append(f"### Assistant: {text}")
    last = request.messages[-1].role if request.messages else None
    if last is not MessageRole.ASSISTANT:
        lines.append("### Assistant:")
    return "\n".join(lines)


def _controls(request: UnifiedRequest) -> dict[str, Any]:
    """``stop``, ``seed`` and ``top_p``; a forced tool call is refused: the route sends
    no tools, so ``"auto"`` and ``"none"`` are what it does anyway and are dropped."""
    if forced(request.tool_choice):
        raise ConfigurationError(
            f"llama_cpp's /completion route has no tool calls, so tool_choice "
            f"{str(request.tool_choice)!r} cannot be met: use the chat route (the default)"
        )
    fields: dict[str, Any] = {}
    if request.stop:
        fields["stop"] = list(request.stop)
    if request.seed is not None:
        fields["seed"] = request.seed
    if request.top_p is not None:
        fields["top_p"] = request.top_p
    return fields


class LlamaCompletionAdapter(ProviderAdapter):
    """Speaks llama-server's native ``POST /completion`` with ``stream: true``, whether
    the request is streamed or not (seed 002: "stream is always true"); a non-streamed
    request is collected from the stream, as every turn is."""

    endpoint = ProviderEndpoint.LLAMA_CPP

    def __init__(self, url: str, api_key: str | None, config: LlamaCppConfig) -> None:
        self.url = url
        self._api_key = api_key or None
        self.config = config

    def __repr__(self) -> str:
        return f"LlamaCompletionAdapter(url={self.url!r})"

    def embedding_route(self) -> EmbeddingRoute:
        """The native ``POST /embedding`` beside ``/completion`` (:mod:`.embeddings`)."""
        from .embeddings import LlamaEmbeddings

        root = self.url.removesuffix("/completion")
        return LlamaEmbeddings(root, bearer_headers(self._api_key, stream=False))

    def encode(self, request: UnifiedRequest) -> HttpRequest:
        config = self.config
        body: dict[str, Any] = {
            "prompt": completion_prompt(request),
            "stream": True,  # seed 002: always; a non-streamed request is collected
            "n_predict": request.max_tokens
            if request.max_tokens is not None
            else DEFAULT_N_PREDICT,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        body.update(_controls(request))
        if config.n_threads is not None:
            body["n_threads"] = config.n_threads
        if config.n_gpu_layers is not None:
            body["n_gpu_layers"] = config.n_gpu_layers
        if config.flash_attn:
            body["flash_attn"] = True
        body["model"] = config.model or request.model
        if request.output_schema is not None:
            body["json_schema"] = dict(request.output_schema.schema)
        # always streamed, and llama-server closes the connection after a stream
        return HttpRequest(self.url, bearer_headers(self._api_key, True, close=True), body)

    def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
        return _StreamedOrWhole()

    def error_message(self, status: int, body: str) -> str | None:
        return chat_error_message(body)

    def overflow(self, status: int, body: str) -> Overflow | None:
        return chat_overflow(status, body)


_STOP_TYPES: Mapping[str, FinishReason] = {
    "eos": FinishReason.STOP,
    "word": FinishReason.STOP,  # one of the request's stop strings
    "limit": FinishReason.LENGTH,
}
"""The final frame's ``stop_type`` values; a frame without one counts as ``eos``."""


class _CompletionFrame(Shape):
    """A ``/completion`` stream frame (wire.md section 7): text, or the final
    ``stop: true`` frame, or an error."""

    content: str | None = None
    stop: bool | None = None
    stop_type: str | None = None
    error: Any = None


_FRAME = msgspec.json.Decoder(_CompletionFrame)


class CompletionDecoder(StreamDecoder):
    """Turns ``/completion`` frames into Text blocks.

    Seed 002: "A non-empty content becomes MessageContentBlock::Text. A frame with empty
    or missing content, including the final {"content": "", "stop": true}, produces no
    block", and "the stream ends when the byte stream ends": the ``stop: true`` frame's
    content is text like any other (llama-server sends it empty), and frames after it
    are still read. No token counts are read: the summary's ``usage`` is ``None``, and
    its ``counted_usage`` has ``prompt_tokens`` 0 and ``completion_tokens`` one per Text
    block (seed 002).
    """

    def __init__(self) -> None:
        self.finished = False  # never: the stream ends with the byte stream
        self.text_blocks = 0
        self._finish_reason: str | None = None

    @guarded_feed("llama_cpp")
    def feed(self, event: SseEvent) -> list[Item]:
        data = event.data
        if not data:
            return []
        frame = decode_frame(_FRAME, data, _PROVIDER)
        if frame.error:
            message = error_text(frame.error)
            raise stream_error(_PROVIDER, message, frame.error, data, chat_overflow)
        if frame.stop:
            self._finish_reason = frame.stop_type or "eos"
        if not frame.content:
            return []
        self.text_blocks += 1
        return [Text(frame.content)]

    def close(self) -> list[Item]:
        return []

    def summary(self) -> TurnSummary:
        counted = TokenUsage(prompt_tokens=0, completion_tokens=self.text_blocks)
        finish = finish_fields(self._finish_reason, _STOP_TYPES)
        return TurnSummary(usage=None, counted_usage=counted, **finish)


class _StreamedOrWhole(StreamDecoder):
    """The route's decoder: the stream it asked for, or (from a server that ignored
    ``stream`` and answered with one JSON document) that document, read as the stream
    it stands for. Which one is settled by the first event."""

    def __init__(self) -> None:
        self._inner: StreamDecoder = CompletionDecoder()
        self._first = True
        self.finished = False

    def feed(self, event: SseEvent) -> list[Item]:
        if self._first:
            self._first = False
            if event.event == JSON_BODY:
                self._inner = WholeResponseDecoder(self._inner, completion_events, _PROVIDER)
        items = self._inner.feed(event)
        self.finished = self._inner.finished
        return items

    def close(self) -> list[Item]:
        return self._inner.close()

    def summary(self) -> TurnSummary:
        return self._inner.summary()
