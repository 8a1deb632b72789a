"""A Messages request body, as a server receives it, read into a
:class:`~cuca.types.UnifiedRequest` (the inverse of :mod:`.encode`).

=========================================  =========================================
the body                                   the request
=========================================  =========================================
``system`` (a string or text blocks)       a System message, first
a ``system`` role inside ``messages``      a System message where it stands (Claude
                                           Code sends one)
``user`` text and ``image`` blocks         a User message
``tool_result`` blocks (``is_error``)      one Tool message each, before the user's
                                           text of the same turn
``assistant`` ``thinking`` blocks          Thinking, in order, with the signature
                                           :class:`~.serving.Signatures` opens
``redacted_thinking``                      a redacted Thinking (its ``data`` opened)
``text``, ``tool_use``                     Text, ToolCall
``max_tokens``                             ``max_tokens`` (covers thinking and answer)
``thinking``                               on (``enabled`` with ``budget_tokens``, or
                                           ``adaptive`` with ``output_config.effort``)
                                           or off (``disabled``)
``tools`` (client tools)                   ``tools``
``stop_sequences``, ``top_p``              ``stop``, ``top_p``
``tool_choice`` (``any``: REQUIRED)        ``tool_choice``
=========================================  =========================================

A budget maps as cuca's own request does: the native ``budget_tokens`` rides in
:class:`~cuca.types.AnthropicThinkingParams` for an Anthropic backend, and the effort
it stands for (the adapter's budget table read backwards) for every other backend.
"""

from __future__ import annotations

from typing import Any

from cuca.errors import ConfigurationError
from cuca.types import (
    AnthropicThinkingParams,
    Block,
    ImageBase64,
    MessageRole,
    ProviderEndpoint,
    Text,
    ThinkingConfig,
    ThinkingEffort,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

from ..serving import Body, Inbound, PassThrough, Signatures

__all__ = ["ANTHROPIC_SIGNATURES", "decode", "decode_request", "effort_of_budget"]

ANTHROPIC_SIGNATURES = PassThrough(ProviderEndpoint.ANTHROPIC)
"""Signatures read as Anthropic's own (what a body written for Anthropic holds)."""

_BUDGETS = (
    (1024, ThinkingEffort.MINIMAL),
    (2048, ThinkingEffort.LOW),
    (8192, ThinkingEffort.MEDIUM),
    (16384, ThinkingEffort.HIGH),
)
_EFFORTS = {
    "low": ThinkingEffort.LOW,
    "medium": ThinkingEffort.MEDIUM,
    "high": ThinkingEffort.HIGH,
    "xhigh": ThinkingEffort.XHIGH,
    "max": ThinkingEffort.XHIGH,
}


def effort_of_budget(budget: int) -> ThinkingEffort:
    """The effort whose budget (the Anthropic adapter's table) is the first at least
    ``budget``; XHIGH above them all."""
    return next((effort for top, effort in _BUDGETS if budget <= top), ThinkingEffort.XHIGH)


def decode_request(body: Any, signatures: Signatures = ANTHROPIC_SIGNATURES) -> UnifiedRequest:
    """The request a Messages body stands for."""
    return decode(body, signatures).request


def decode(
    body: Any, signatures: Signatures = ANTHROPIC_SIGNATURES, *, counting: bool = False
) -> Inbound:
    """The request a Messages body stands for (``counting``: a ``count_tokens`` body,
    which has no ``max_tokens``). Raises :class:`~cuca.errors.ConfigurationError`
    naming the first field that is missing or of the wrong type."""
    top = Body(body)
    model = top.text("model", required=True) or ""
    max_tokens = top.integer("max_tokens", minimum=1)
    if max_tokens is None and not counting:
        raise ConfigurationError("max_tokens is required")
    messages: list[UnifiedMessage] = []
    system = _system_text(top)
    if system:
        messages.append(UnifiedMessage(MessageRole.SYSTEM, (Text(system),)))
    turns = top.objects("messages", required=True)
    if not turns:
        raise ConfigurationError("messages must hold at least one message")
    for turn in turns:
        messages.extend(_turn(turn, signatures))
    request = UnifiedRequest(
        model=model,
        messages=tuple(messages),
        temperature=top.number("temperature"),
        max_tokens=max_tokens,
        stream=bool(top.boolean("stream")),
        thinking=_thinking(top),
        tools=tuple(_tool(t) for t in top.objects("tools")),
        stop=_stop_sequences(top),
        top_p=top.number("top_p"),
        tool_choice=_tool_choice(top.object("tool_choice")),
    )
    return Inbound(request)


def _stop_sequences(top: Body) -> tuple[str, ...]:
    value = top.get("stop_sequences", list, what="an array of strings") or []
    if not all(isinstance(v, str) for v in value):
        raise ConfigurationError("stop_sequences must hold strings only")
    return tuple(value)


_CHOICES = {"auto": ToolChoice.AUTO, "any": ToolChoice.REQUIRED, "none": ToolChoice.NONE}


def _tool_choice(choice: Body | None) -> ToolChoice | None:
    """``{"type": "auto" | "any" | "none"}``, or ``{"type": "tool", "name"}``."""
    if choice is None:
        return None
    kind = choice.text("type", required=True) or ""
    if kind == "tool":
        return ToolChoice.tool(choice.text("name", required=True) or "")
    if kind not in _CHOICES:
        raise ConfigurationError(f"tool_choice.type must be auto, any, none or tool, not {kind!r}")
    return _CHOICES[kind]


def _system_text(top: Body) -> str:
    value = top.get("system", str, list, what="a string or an array of text blocks")
    if value is None or isinstance(value, str):
        return value or ""
    return "\n".join(_text_block(b) for b in top.objects("system"))


def _text_block(block: Body) -> str:
    kind = block.text("type")
    if kind not in ("text", None):
        raise ConfigurationError(f"{block.at('type')} must be text here, not {kind!r}")
    return block.text("text", required=True) or ""


# -- messages --------------------------------------------------------------------------


def _turn(turn: Body, signatures: Signatures) -> list[UnifiedMessage]:
    role = turn.text("role", required=True)
    content = turn.get("content", str, list, required=True, what="a string or an array")
    if role == "system":  # Claude Code puts its reminders here
        text = (
            content
            if isinstance(content, str)
            else "\n".join(_text_block(b) for b in turn.objects("content"))
        )
        return [UnifiedMessage(MessageRole.SYSTEM, (Text(text),))]
    if role not in ("user", "assistant"):
        raise ConfigurationError(f"{turn.at('role')} must be user or assistant, not {role!r}")
    if isinstance(content, str):
        message_role = MessageRole.USER if role == "user" else MessageRole.ASSISTANT
        return [UnifiedMessage(message_role, (Text(content),))]
    blocks = turn.objects("content")
    if role == "assistant":
        assistant = tuple(_assistant_block(b, signatures) for b in blocks)
        return [UnifiedMessage(MessageRole.ASSISTANT, tuple(b for b in assistant if b))]
    return _user_turn(blocks)


def _user_turn(blocks: list[Body]) -> list[UnifiedMessage]:
    """Tool results first, one Tool message each, then the user's own blocks."""
    out: list[UnifiedMessage] = []
    rest: list[Block] = []
    for block in blocks:
        kind = block.text("type", required=True)
        if kind == "tool_result":
            result = _tool_result(block)
            out.append(UnifiedMessage(MessageRole.TOOL, (result,), result.tool_call_id))
        elif kind == "text":
            rest.append(Text(block.text("text", required=True) or ""))
        elif kind == "image":
            rest.append(_image(block))
        else:
            raise ConfigurationError(f"{block.at('type')} {kind!r} is not a block cuca reads")
    if rest or not out:
        out.append(UnifiedMessage(MessageRole.USER, tuple(rest)))
    return out


def _tool_result(block: Body) -> ToolResult:
    call_id = block.text("tool_use_id", required=True) or ""
    value = block.get("content", str, list, what="a string or an array of blocks")
    if value is None or isinstance(value, str):
        output = value or ""
    else:
        output = "\n".join(_text_block(b) for b in block.objects("content"))
    return ToolResult(call_id, output, is_error=bool(block.boolean("is_error")))


def _image(block: Body) -> ImageBase64:
    source = block.object("source", required=True)
    assert source is not None
    if source.text("type") != "base64":
        raise ConfigurationError(f"{source.at('type')} must be base64 (no remote images)")
    media = source.text("media_type", required=True) or ""
    return ImageBase64(media, source.text("data", required=True) or "")


def _assistant_block(block: Body, signatures: Signatures) -> Block | None:
    kind = block.text("type", required=True)
    if kind == "text":
        text = block.text("text", required=True) or ""
        return Text(text) if text else None
    if kind == "thinking":
        text = block.text("thinking", required=True) or ""
        return signatures.open(text, block.text("signature") or "")
    if kind == "redacted_thinking":
        return signatures.open("", block.text("data", required=True) or "", redacted=True)
    if kind == "tool_use":
        call_id = block.text("id", required=True) or ""
        arguments = block.get("input", dict, what="a JSON object")
        return ToolCall(call_id, block.text("name", required=True) or "", arguments)
    raise ConfigurationError(f"{block.at('type')} {kind!r} is not a block cuca reads")


# -- the rest of the request -----------------------------------------------------------


def _thinking(top: Body) -> ThinkingConfig | None:
    spec = top.object("thinking")
    if spec is None:
        return None
    kind = spec.text("type", required=True)
    if kind == "disabled":
        return ThinkingConfig.off()
    if kind == "enabled":
        budget = spec.integer("budget_tokens", minimum=1)
        if budget is None:  # a gateway's bare opt-in (seed 004)
            params = AnthropicThinkingParams(without_budget=True)
            return ThinkingConfig(True, ThinkingEffort.MEDIUM, params)
        params = AnthropicThinkingParams(budget_tokens=budget)
        return ThinkingConfig(True, effort_of_budget(budget), params)
    if kind == "adaptive":
        output = top.object("output_config")
        effort = (output.text("effort") if output is not None else None) or "high"
        level = _EFFORTS.get(effort, ThinkingEffort.HIGH)
        return ThinkingConfig(True, level, AnthropicThinkingParams(effort=effort))
    raise ConfigurationError(f"thinking.type must be enabled, disabled or adaptive, not {kind!r}")


def _tool(tool: Body) -> ToolDefinition:
    kind = tool.text("type")
    if kind not in ("custom", None):
        raise ConfigurationError(f"{tool.at('type')} {kind!r}: only client tools are served")
    schema = tool.get("input_schema", dict, required=True)
    description = tool.text("description") or ""
    return ToolDefinition(tool.text("name", required=True) or "", description, schema)
