"""The ``/responses`` wire shape (OpenAI's Responses API): OpenAI, vLLM, LM Studio and
llama.cpp, selected with ``OpenAiConfig(api=OpenAiApi.RESPONSES)``.

The request is stateless: ``store: false`` with ``include: ["reasoning.encrypted_content"]``,
so that a reasoning item comes back encrypted and is replayed by the client rather than
looked up on the server. System text becomes ``instructions``; every other message
becomes ``input`` items in order (field names from the ``openai`` package's
``types/responses/``):

=================================  ===============================================
unified block                      input item
=================================  ===============================================
user / assistant Text              ``{"role": ..., "content": ...}`` (a message)
ImageBase64 (user)                 ``{"type": "input_image", "image_url": data URL}``
Thinking with an ``id``            ``{"type": "reasoning", "id", "summary",
                                   "encrypted_content"}`` (only to the same endpoint)
ToolCall                           ``{"type": "function_call", "call_id", "name",
                                   "arguments"}``
ToolResult                         ``{"type": "function_call_output", "call_id",
                                   "output"}``
=================================  ===============================================

The stream decoder lives in :mod:`.decode`.
"""

from __future__ import annotations

from typing import Any

from cuca.types import (
    ImageBase64,
    MessageRole,
    OutputSchema,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingConfig,
    ToolCall,
    ToolChoiceMode,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

from ..base import HttpRequest, StreamDecoder, refuse
from ..chat.encode import OpenAiCompatAdapter, bearer_headers, reasoning_effort, require_key
from ..controls import no_stop, tool_choice
from ..whole_response import for_request
from .decode import ResponsesDecoder
from .whole import responses_events

__all__ = ["ResponsesAdapter", "encode_input", "encode_responses_body"]


def _user_items(message: UnifiedMessage) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for result in (b for b in message.content if isinstance(b, ToolResult)):
        call_id = result.tool_call_id or message.tool_call_id or ""
        items.append({"type": "function_call_output", "call_id": call_id, "output": result.output})
    if message.role is MessageRole.TOOL and not items:
        output = message.text()
        items.append(
            {"type": "function_call_output", "call_id": message.tool_call_id, "output": output}
        )
        return items
    if message.role is MessageRole.TOOL:
        return items
    if any(isinstance(b, ImageBase64) for b in message.content):
        parts: list[dict[str, Any]] = []
        for block in message.content:
            if isinstance(block, Text):
                parts.append({"type": "input_text", "text": block.text})
            elif isinstance(block, ImageBase64):
                url = f"data:{block.media_type};base64,{block.data}"
                parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        items.append({"role": "user", "content": parts})
    elif any(isinstance(b, Text) for b in message.content) or not message.content:
        items.append({"role": "user", "content": message.text()})
    return items


def _reasoning_item(block: Thinking, text: str) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": block.id}
    if block.signature is not None:  # OpenAI: the summary and the encrypted reasoning
        item["summary"] = [{"type": "summary_text", "text": text}] if text else []
        item["encrypted_content"] = block.signature
    else:  # vLLM, LM Studio, llama.cpp: the reasoning text itself
        item["summary"] = []
        item["content"] = [{"type": "reasoning_text", "text": text}]
    return item


def _assistant_items(message: UnifiedMessage, endpoint: ProviderEndpoint) -> list[dict[str, Any]]:
    """An assistant turn's items, in the order its blocks came: reasoning deltas are
    joined up to the block carrying the item's id; thinking from another endpoint, or
    without an id, is not replayed (the server could not verify it)."""
    items: list[dict[str, Any]] = []
    text: list[str] = []
    thinking: list[str] = []

    def flush_text() -> None:
        if text:
            items.append({"role": "assistant", "content": "".join(text)})
            text.clear()

    for block in message.content:
        if isinstance(block, Thinking):
            if block.provider != endpoint or block.redacted:
                continue
            thinking.append(block.text)
            if block.id is not None:
                flush_text()
                items.append(_reasoning_item(block, "".join(thinking)))
                thinking.clear()
            continue
        if isinstance(block, Text):
            text.append(block.text)
        elif isinstance(block, ToolCall):
            flush_text()
            arguments = block.arguments_json()
            call = {"type": "function_call", "call_id": block.id, "name": block.name}
            items.append({**call, "arguments": arguments})
    flush_text()
    return items


def encode_input(
    request: UnifiedRequest, endpoint: ProviderEndpoint
) -> tuple[str | None, list[dict[str, Any]]]:
    """The ``instructions`` (system messages joined by newlines, or ``None``) and the
    ``input`` items of a conversation sent to ``endpoint``."""
    system: list[str] = []
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role is MessageRole.SYSTEM:
            system.append(message.text())
        elif message.role is MessageRole.ASSISTANT:
            items.extend(_assistant_items(message, endpoint))
        else:
            items.extend(_user_items(message))
    return ("\n".join(system) if system else None), items


def _reasoning(thinking: ThinkingConfig | None) -> dict[str, Any] | None:
    if thinking is None or not thinking.enabled:
        return None
    effort = reasoning_effort(thinking)
    return {"summary": "auto"} if effort is None else {"effort": effort, "summary": "auto"}


def encode_responses_body(
    request: UnifiedRequest, model: str, endpoint: ProviderEndpoint
) -> dict[str, Any]:
    """The JSON body of one ``/responses`` request to ``endpoint`` (streamed unless
    ``request.stream`` is false)."""
    instructions, items = encode_input(request, endpoint)
    body: dict[str, Any] = {"model": model, "input": items, "stream": request.stream}
    body["store"] = False
    body["include"] = ["reasoning.encrypted_content"]
    if instructions is not None:
        body["instructions"] = instructions
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    reasoning = _reasoning(request.thinking)
    if reasoning is not None:
        body["reasoning"] = reasoning
    if request.output_schema is not None:
        body["text"] = responses_text_format(request.output_schema)
    if request.tools:
        body["tools"] = [_tool(t.name, t.description, dict(t.input_schema)) for t in request.tools]
    no_stop(request, f"{endpoint}'s Responses API")
    if request.top_p is not None:
        body["top_p"] = request.top_p
    choice = tool_choice(request)
    if choice is not None:  # the Responses API has no seed: a request's is dropped
        named = {"type": "function", "name": choice.name}
        body["tool_choice"] = named if choice.mode is ToolChoiceMode.TOOL else choice.mode.value
    return body


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": description, "parameters": parameters}


class ResponsesAdapter(OpenAiCompatAdapter):
    """Speaks ``POST {base_url}/responses`` for one OpenAI-compatible server (the URL,
    key and model handling are the chat adapter's)."""

    route = "responses"

    def encode(self, request: UnifiedRequest) -> HttpRequest:
        require_key(self.dialect, self.url, self._api_key)
        if self.endpoint == ProviderEndpoint.LLAMA_CPP:  # it ignores text.format
            refuse("llama_cpp's /v1/responses route", request.output_schema)
        body = encode_responses_body(request, self._model or request.model, self.endpoint)
        close = self.dialect.closes_after_stream
        return HttpRequest(self.url, bearer_headers(self._api_key, request.stream, close), body)

    def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
        decoder = ResponsesDecoder(self.endpoint)
        return for_request(request, decoder, responses_events, self.dialect.name)


# -- how this wire asks for an answer that follows a JSON Schema --------------------


def responses_text_format(spec: OutputSchema) -> dict[str, Any]:
    """``text`` of ``/responses`` with a JSON Schema format."""
    fmt = {"type": "json_schema", "name": spec.name, "schema": dict(spec.schema)}
    return {"format": {**fmt, "strict": spec.strict}}
