"""A ``/responses`` request body, as a server receives it, read into a
:class:`~cuca.types.UnifiedRequest` (the inverse of :mod:`.encode`).

=========================================  =========================================
the body                                   the request
=========================================  =========================================
``instructions``                           a System message, first
``input`` as a string                      one User message
a message item (``role``: ``system``,      a message of that role (``developer`` is
``developer``, ``user``, ``assistant``)    System); ``input_text``/``output_text``
                                           parts joined, ``input_image`` data URLs
a ``reasoning`` item                       Thinking: its ``content`` text (else its
                                           ``summary``), ``id``, and
                                           ``encrypted_content`` opened by
                                           :class:`~.serving.Signatures`
a ``function_call`` item                   a ToolCall (``call_id``, ``name``,
                                           ``arguments``)
a ``function_call_output`` item            a Tool message with one ToolResult
``max_output_tokens``                      ``max_tokens``
``reasoning.effort``                       ``thinking`` (``none``: off)
``tools`` (functions)                      ``tools``
``text.format`` (``json_schema``)          ``output_schema``
``top_p``, ``tool_choice``                 the same fields
=========================================  =========================================

Consecutive assistant items (reasoning, a message, calls) are one assistant turn, in
their order. The server keeps no state: ``previous_response_id`` is refused (send the
whole conversation, as with ``store: false``).
"""

from __future__ import annotations

from typing import Any

import attrs

from cuca.errors import ConfigurationError
from cuca.types import (
    Block,
    MessageRole,
    OutputSchema,
    Text,
    ThinkingConfig,
    ToolCall,
    ToolDefinition,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

from ..chat.inbound import EFFORTS, image_block, tool_choice
from ..serving import PASS_THROUGH, Body, Inbound, Signatures

__all__ = ["decode", "decode_request"]

_ROLES = {
    "system": MessageRole.SYSTEM,
    "developer": MessageRole.SYSTEM,
    "user": MessageRole.USER,
    "assistant": MessageRole.ASSISTANT,
}


def decode_request(body: Any, signatures: Signatures = PASS_THROUGH) -> UnifiedRequest:
    """The request a ``/responses`` body stands for."""
    return decode(body, signatures).request


def decode(body: Any, signatures: Signatures = PASS_THROUGH) -> Inbound:
    """The request a ``/responses`` body stands for. Raises
    :class:`~cuca.errors.ConfigurationError` naming the first field that is missing or
    of the wrong type."""
    top = Body(body)
    if top.get("previous_response_id", str) is not None:
        raise ConfigurationError(
            "previous_response_id is not served: this server keeps no responses, "
            "send the whole conversation in input"
        )
    model = top.text("model", required=True) or ""
    messages: list[UnifiedMessage] = []
    instructions = top.text("instructions")
    if instructions:
        messages.append(UnifiedMessage(MessageRole.SYSTEM, (Text(instructions),)))
    value = top.get("input", str, list, required=True, what="a string or an array of items")
    if isinstance(value, str):
        messages.append(UnifiedMessage(MessageRole.USER, (Text(value),)))
    else:
        messages.extend(_items(top.objects("input"), signatures))
    request = UnifiedRequest(
        model=model,
        messages=tuple(messages),
        temperature=top.number("temperature"),
        max_tokens=top.integer("max_output_tokens", minimum=1),
        stream=bool(top.boolean("stream")),
        thinking=_thinking(top.object("reasoning")),
        tools=tuple(_tool(t) for t in top.objects("tools")),
        output_schema=_output_schema(top.object("text")),
        top_p=top.number("top_p"),
        tool_choice=tool_choice(top),
    )
    return Inbound(request)


def _items(items: list[Body], signatures: Signatures) -> list[UnifiedMessage]:
    out: list[UnifiedMessage] = []
    turn: list[Block] = []  # the assistant turn being gathered

    def flush() -> None:
        if turn:
            out.append(UnifiedMessage(MessageRole.ASSISTANT, tuple(turn)))
            turn.clear()

    for item in items:
        kind = item.text("type") or "message"
        if kind == "reasoning":
            turn.append(_reasoning(item, signatures))
        elif kind == "function_call":
            call_id = item.text("call_id", required=True) or ""
            arguments = item.get("arguments", str, dict, what="a JSON object or its text")
            turn.append(ToolCall(call_id, item.text("name", required=True) or "", arguments))
        elif kind == "message" and item.text("role") == "assistant":
            text = _parts_text(item)
            if text:
                turn.append(Text(text))
        elif kind == "function_call_output":
            flush()
            call_id = item.text("call_id", required=True) or ""
            value = item.get("output", str, list, required=True, what="a string or parts")
            output = value if isinstance(value, str) else _parts_text(item, "output")
            out.append(UnifiedMessage(MessageRole.TOOL, (ToolResult(call_id, output),), call_id))
        elif kind == "message":
            flush()
            out.append(_message(item))
        else:
            raise ConfigurationError(f"{item.at('type')} {kind!r} is not an item cuca reads")
    flush()
    return out


def _message(item: Body) -> UnifiedMessage:
    role = item.text("role", required=True) or ""
    if role not in _ROLES:
        names = ", ".join(_ROLES)
        raise ConfigurationError(f"{item.at('role')} must be one of {names}, not {role!r}")
    value = item.get("content", str, list, required=True, what="a string or an array of parts")
    if isinstance(value, str):
        return UnifiedMessage(_ROLES[role], (Text(value),))
    blocks: list[Block] = []
    for part in item.objects("content"):
        kind = part.text("type", required=True)
        if kind in ("input_text", "output_text", "text"):
            blocks.append(Text(part.text("text", required=True) or ""))
        elif kind == "input_image" and role == "user":
            url = part.text("image_url", required=True) or ""
            blocks.append(image_block(url, part.at("image_url")))
        else:
            raise ConfigurationError(f"{part.at('type')} {kind!r} is not a part cuca reads")
    return UnifiedMessage(_ROLES[role], tuple(blocks))


def _parts_text(item: Body, key: str = "content") -> str:
    value = item.get(key, str, list, what="a string or an array of parts")
    if value is None or isinstance(value, str):
        return value or ""
    return "".join(part.text("text") or "" for part in item.objects(key))


def _reasoning(item: Body, signatures: Signatures) -> Block:
    content = "".join(p.text("text") or "" for p in item.objects("content"))
    summary = "".join(p.text("text") or "" for p in item.objects("summary"))
    block = signatures.open(content or summary, item.text("encrypted_content") or "")
    if block.id is not None:  # the backend's own id, from the server's seal
        return block
    return attrs.evolve(block, id=item.text("id"))


def _thinking(reasoning: Body | None) -> ThinkingConfig | None:
    effort = reasoning.text("effort") if reasoning is not None else None
    if effort is None:
        return None
    if effort not in EFFORTS:
        names = ", ".join(EFFORTS)
        raise ConfigurationError(f"reasoning.effort must be one of {names}, not {effort!r}")
    level = EFFORTS[effort]
    return ThinkingConfig.off() if level is None else ThinkingConfig(True, level)


def _tool(tool: Body) -> ToolDefinition:
    kind = tool.text("type")
    if kind not in ("function", None):
        raise ConfigurationError(f"{tool.at('type')} {kind!r}: only function tools are served")
    schema = tool.get("parameters", dict) or {"type": "object", "properties": {}}
    description = tool.text("description") or ""
    return ToolDefinition(tool.text("name", required=True) or "", description, schema)


def _output_schema(text: Body | None) -> OutputSchema | None:
    spec = text.object("format") if text is not None else None
    if spec is None or spec.text("type") in ("text", None):
        return None
    if spec.text("type") == "json_object":
        return OutputSchema("output", {"type": "object"}, strict=False)
    if spec.text("type") != "json_schema":
        raise ConfigurationError(f"text.format.type {spec.text('type')!r} is not served")
    return OutputSchema(
        spec.text("name") or "output",
        spec.get("schema", dict) or {"type": "object"},
        strict=bool(spec.boolean("strict")),
    )
