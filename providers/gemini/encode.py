"""Gemini ``streamGenerateContent``: request encoding, framing and the adapter.

Three things set Gemini apart from the other wire shapes:

* a tool result names the *function*, not the call: ``functionResponse.name`` is the
  Tool message's ``name``, else the name of the earlier ToolCall with that id, else the
  call id itself;
* opaque ``thoughtSignature`` values ride on individual parts, and go back on the same
  kind of part they arrived on (thought, text or function call);
* an error that happens mid-stream is a raw JSON object appended to the body outside
  any SSE framing, which :class:`GeminiFramer` turns back into an event.
"""

from __future__ import annotations

import json
import re
from typing import Any

from cuca.batch_wire import BatchWire
from cuca.errors import ConfigurationError, ProviderError
from cuca.stages.framing import JsonOrSse
from cuca.stages.sse import STRAY_LINE, SseEvent, SseParser
from cuca.types import (
    Block,
    GeminiThinkingParams,
    ImageBase64,
    MessageRole,
    OutputSchema,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    TokenCount,
    ToolCall,
    ToolChoice,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)
from cuca.vectors import EmbeddingRoute

from ..base import ClientSettings, Framer, HttpRequest, ProviderAdapter, Send, StreamDecoder
from ..controls import stop_sequences, tool_choice
from ..decoding import Overflow
from ..table import missing_key_hint
from ..whole_response import for_request
from .decode import SYNTHETIC_ID, GeminiDecoder
from .overflow import gemini_overflow
from .whole import gemini_events

__all__ = ["GeminiAdapter", "GeminiFramer", "make_gemini"]

GEMINI = ProviderEndpoint.GOOGLE_GEMINI

THINKING_LEVEL = {
    ThinkingEffort.MINIMAL: "LOW",
    ThinkingEffort.LOW: "LOW",
    ThinkingEffort.MEDIUM: "MEDIUM",
    ThinkingEffort.HIGH: "HIGH",
    ThinkingEffort.XHIGH: "HIGH",
}
_SYNTHETIC = re.compile(SYNTHETIC_ID)
MAX_RAW_ERROR = 64 * 1024
"""Raw error text beyond this many characters is passed on without waiting for it to
parse (its lines are re-joined and re-parsed as they come, so this bounds that work)."""


def make_gemini(settings: ClientSettings) -> GeminiAdapter:
    """The adapter for ``ProviderEndpoint.GOOGLE_GEMINI``.

    A key is required for Google's own URL. With a ``base_url`` set it is optional: a
    local gateway may serve Gemini's routes without one, and then no key header is sent.
    """
    base = settings.url()
    return GeminiAdapter(base, settings.api_key, key_required=not settings.base_url)


class GeminiAdapter(ProviderAdapter):
    """Encodes requests for, and decodes streams of, the Gemini API."""

    endpoint = GEMINI

    def __init__(self, base_url: str, api_key: str | None, *, key_required: bool = True) -> None:
        self.base_url = base_url
        self._api_key = api_key
        self.key_required = key_required

    def __repr__(self) -> str:
        return f"GeminiAdapter({self.base_url!r})"

    def embedding_route(self) -> EmbeddingRoute:
        """``embedContent`` and ``batchEmbedContents`` (:mod:`.embeddings`)."""
        from .embeddings import GeminiEmbeddings

        return GeminiEmbeddings(self.base_url, self._headers())

    def _headers(self) -> dict[str, str]:
        """JSON headers with the key; a ``ConfigurationError`` when it is required and
        missing."""
        if self.key_required and not self._api_key:
            hint = missing_key_hint("google_gemini")
            raise ConfigurationError(f"gemini requires an api key: {hint}")
        headers = {"content-type": "application/json"}
        if self._api_key:
            headers["x-goog-api-key"] = self._api_key
        return headers

    def encode(self, request: UnifiedRequest) -> HttpRequest:
        headers = self._headers()
        model = request.model.removeprefix("models/")
        method = "streamGenerateContent?alt=sse" if request.stream else "generateContent"
        url = f"{self.base_url}/v1beta/models/{model}:{method}"
        return HttpRequest(url, headers, encode_body(request))

    def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
        return for_request(request, GeminiDecoder(), gemini_events, "gemini")

    def new_framer(self) -> Framer:
        return JsonOrSse(GeminiFramer())

    def error_message(self, status: int, body: str) -> str | None:
        try:
            payload = json.loads(body)
        except ValueError:
            return None
        if isinstance(payload, list) and payload:
            payload = payload[0]
        error = payload.get("error") if isinstance(payload, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        return message if isinstance(message, str) else None

    def overflow(self, status: int, body: str) -> Overflow | None:
        return gemini_overflow(status, body)

    def batch_wire(self) -> BatchWire:
        """Gemini's batch mode (:mod:`.batch`)."""
        from .batch import GeminiBatches

        headers = {"x-goog-api-key": self._api_key} if self._api_key else {}
        return GeminiBatches(self, self.base_url, headers)

    async def count_tokens(self, request: UnifiedRequest, send: Send) -> TokenCount:
        """Exact: ``models/{model}:countTokens`` with the turn's whole body as its
        ``generateContentRequest``, so the system instruction and tools count too."""
        encoded = self.encode(request)
        model = request.model.removeprefix("models/")
        url = f"{self.base_url}/v1beta/models/{model}:countTokens"
        body = {"generateContentRequest": {"model": f"models/{model}", **encoded.body}}
        answer = await send(HttpRequest(url, encoded.headers, body))
        tokens = answer.get("totalTokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, int):
            raise ProviderError("gemini", f"countTokens answered {answer!r:.200}")
        return TokenCount(tokens, exact=True, method="gemini countTokens")


class GeminiFramer:
    """Server-sent events, plus the raw JSON error object Gemini appends outside the
    framing: once its lines parse as JSON (or at the end of the body, or past
    ``MAX_RAW_ERROR`` characters) it is returned as a synthetic
    ``SseEvent(data=<json>, event="error")``."""

    def __init__(self) -> None:
        self._sse = SseParser(keep_stray_lines=True)
        self._raw: list[str] = []

    def feed(self, data: bytes) -> list[SseEvent]:
        return self._sort(self._sse.feed(data))

    def close(self) -> list[SseEvent]:
        events = self._sort(self._sse.close())
        if self._raw:
            events.append(SseEvent(data="\n".join(self._raw), event="error"))
            self._raw = []
        return events

    def _sort(self, parsed: list[SseEvent]) -> list[SseEvent]:
        """Pass events through; gather stray lines, in place, into raw JSON objects."""
        events = []
        for event in parsed:
            if event.event != STRAY_LINE:
                events.append(event)
                continue
            line = event.data
            if not self._raw and not line.lstrip().startswith(("{", "[")):
                continue  # a stray line that starts no JSON value is ignored, as SSE says
            self._raw.append(line)
            text = "\n".join(self._raw)
            if len(text) < MAX_RAW_ERROR:
                try:
                    json.loads(text)
                except (ValueError, RecursionError):
                    continue
            events.append(SseEvent(data=text, event="error"))
            self._raw = []
        return events


# -- request body ----------------------------------------------------------------------


MAX_STOP = 5
"""Gemini's ``stopSequences`` hold at most five ("up to 5", the API reference)."""


def encode_body(request: UnifiedRequest) -> dict[str, Any]:
    """The JSON body of a ``streamGenerateContent`` call."""
    body: dict[str, Any] = {}
    system = "\n".join(m.text() for m in request.messages if m.role is MessageRole.SYSTEM)
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    body["contents"] = _contents(request.messages)
    if request.tools:
        declarations = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.input_schema}
            for t in request.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    choice = tool_choice(request)
    if choice is not None:
        body["toolConfig"] = {"functionCallingConfig": _calling_config(choice)}
    config = _generation_config(request)
    if config:
        body["generationConfig"] = config
    return body


_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY", "tool": "ANY"}
"""``tool_choice`` modes as ``functionCallingConfig.mode`` values."""


def _calling_config(choice: ToolChoice) -> dict[str, Any]:
    """``ANY`` restricted to the named function for one tool, else the mode alone."""
    config: dict[str, Any] = {"mode": _MODES[choice.mode.value]}
    if choice.name is not None:
        config["allowedFunctionNames"] = [choice.name]
    return config


def _generation_config(request: UnifiedRequest) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    stop = stop_sequences(request, "gemini", MAX_STOP)
    if stop:
        config["stopSequences"] = stop
    if request.seed is not None:
        config["seed"] = request.seed
    if request.top_p is not None:
        config["topP"] = request.top_p
    if request.thinking is not None:
        config["thinkingConfig"] = _thinking_config(request.thinking)
    if request.output_schema is not None:
        config.update(gemini_fields(request.output_schema))
    return config


def _thinking_config(thinking: ThinkingConfig) -> dict[str, Any]:
    if not thinking.enabled:
        return {"includeThoughts": False}
    params = thinking.params
    if isinstance(params, GeminiThinkingParams) and params.thinking_budget is not None:
        return {"thinkingBudget": params.thinking_budget, "includeThoughts": True}
    if isinstance(params, GeminiThinkingParams) and params.thinking_level is not None:
        return {"thinkingLevel": params.thinking_level, "includeThoughts": True}
    if thinking.effort is None:
        return {"includeThoughts": True}
    return {"thinkingLevel": THINKING_LEVEL[thinking.effort], "includeThoughts": True}


def _contents(messages: tuple[UnifiedMessage, ...]) -> list[dict[str, Any]]:
    calls = {
        block.id: block
        for message in messages
        for block in message.content
        if isinstance(block, ToolCall)
    }
    contents: list[dict[str, Any]] = []
    previous: MessageRole | None = None
    for message in messages:
        if message.role is MessageRole.SYSTEM:
            continue
        if message.role is MessageRole.TOOL:
            parts = _tool_parts(message, calls)
        else:
            parts = [p for block in message.content if (p := _part(block, calls)) is not None]
        if not parts:
            continue
        if message.role is MessageRole.TOOL and previous is MessageRole.TOOL:
            # All answers to one model turn's calls travel in one user turn.
            contents[-1]["parts"].extend(parts)
        else:
            role = "model" if message.role is MessageRole.ASSISTANT else "user"
            contents.append({"role": role, "parts": parts})
        previous = message.role
    return contents


def _part(block: Block, calls: dict[str, ToolCall]) -> dict[str, Any] | None:
    """The part for one block; a signature goes back only to Gemini, on the same part."""
    part: dict[str, Any]
    if isinstance(block, Text):
        if not block.text and not _signature(block):
            return None
        part = {"text": block.text}
    elif isinstance(block, Thinking):
        if block.provider != GEMINI:
            return None  # another provider's reasoning means nothing to Gemini
        part = {"text": block.text, "thought": True}
    elif isinstance(block, ToolCall):
        call: dict[str, Any] = {"name": block.name, "args": block.arguments_object()}
        if _server_id(block):
            call["id"] = block.id
        part = {"functionCall": call}
    elif isinstance(block, ImageBase64):
        return {"inlineData": {"mimeType": block.media_type, "data": block.data}}
    elif isinstance(block, ToolResult):
        return _function_response(block, calls.get(block.tool_call_id), None)
    else:
        return None
    signature = _signature(block)
    if signature:
        part["thoughtSignature"] = signature
    return part


def _tool_parts(message: UnifiedMessage, calls: dict[str, ToolCall]) -> list[dict[str, Any]]:
    results = [b for b in message.content if isinstance(b, ToolResult)]
    if not results:
        results = [ToolResult(message.tool_call_id or "", message.text())]
    return [_function_response(r, calls.get(r.tool_call_id), message.name) for r in results]


def _function_response(
    result: ToolResult, call: ToolCall | None, message_name: str | None
) -> dict[str, Any]:
    """Gemini matches a result to its call by function name (the message's ``name``,
    else the call's, else the call id); the id goes along only when Gemini issued it."""
    name = message_name or (call.name if call is not None else "") or result.tool_call_id
    key = "error" if result.is_error else "output"
    response: dict[str, Any] = {"name": name, "response": {key: result.output}}
    if call is not None and _server_id(call):
        response["id"] = call.id
    return {"functionResponse": response}


def _signature(block: Text | Thinking | ToolCall) -> str | None:
    return block.signature if block.provider == GEMINI else None


def _server_id(call: ToolCall) -> bool:
    """Whether Gemini itself issued ``call.id`` (ids cuca made up are not sent back:
    Gemini 2 rejects an ``id`` it does not expect)."""
    return call.provider == GEMINI and bool(call.id) and not _SYNTHETIC.fullmatch(call.id)


# -- how this wire asks for an answer that follows a JSON Schema --------------------


def gemini_fields(spec: OutputSchema) -> dict[str, Any]:
    """The ``generationConfig`` keys of Gemini's JSON mode with a schema."""
    return {"responseMimeType": "application/json", "responseJsonSchema": dict(spec.schema)}
