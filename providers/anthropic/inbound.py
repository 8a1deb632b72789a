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
``output_config.format`` (``json_schema``)  ``output_schema`` (named ``output``)
``cache_control`` on the last block of a   ``prompt_cache`` (``system``, ``tools``,
message, of ``system``, or on the last     the message's index)
tool
=========================================  =========================================

A budget maps as cuca's own request does: the native ``budget_tokens`` rides in
:class:`~cuca.types.AnthropicThinkingParams` for an Anthropic backend, and the effort
it stands for (the adapter's budget table read backwards) for every other backend.
"""

from __future__ import annotations

from typing import Any

import attrs

from cuca.errors import ConfigurationError
from cuca.types import (
    AnthropicThinkingParams,
    Block,
    ImageBase64,
    MessageRole,
    OutputSchema,
    PromptCache,
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
    body: Any,
    signatures: Signatures = ANTHROPIC_SIGNATURES,
    *,
    counting: bool = False,
    strict: bool = False,
) -> Inbound:
    """The request a Messages body stands for (``counting``: a ``count_tokens`` body,
    which has no ``max_tokens``). Raises :class:`~cuca.errors.ConfigurationError`
    naming the first field that is missing or of the wrong type; ``strict``, also the
    first field cuca has no place for (:meth:`.serving.Body.finish`), which the server
    ignores."""
    top = Body(body, strict=strict)
    model = top.text("model", required=True) or ""
    max_tokens = top.integer("max_tokens", minimum=1)
    if max_tokens is None and not counting:
        raise ConfigurationError("max_tokens is required")
    messages: list[UnifiedMessage] = []
    system = _system_text(top)
    if system.text:
        messages.append(UnifiedMessage(MessageRole.SYSTEM, (Text(system.text),)))
    turns = top.objects("messages", required=True)
    if not turns:
        raise ConfigurationError("messages must hold at least one message")
    marked: list[int] = []
    for turn in turns:
        for message, cached in _turn(turn, signatures):
            if cached:
                marked.append(len(messages))
            messages.append(message)
    tools = top.objects("tools")
    output = top.object("output_config")
    request = UnifiedRequest(
        model=model,
        messages=tuple(messages),
        temperature=top.number("temperature"),
        max_tokens=max_tokens,
        stream=bool(top.boolean("stream")),
        thinking=_thinking(top.object("thinking"), output),
        tools=tuple(_tool(t) for t in tools),
        prompt_cache=_prompt_cache(system.cached, _last_cached(tools), marked),
        output_schema=_output_schema(output),
        stop=_stop_sequences(top),
        top_p=top.number("top_p"),
        tool_choice=_tool_choice(top.object("tool_choice")),
    )
    top.default("service_tier", "auto", "the vendor's capacity")
    top.finish(_HINTS)
    return Inbound(request)


_HINTS = {
    "top_k": "the local engine's SamplingConfig has top_k; the wires' requests do not",
    "metadata": "an end user's id is the vendor's own",
    "container": "a vendor's hosted tool",
    "mcp_servers": "cuca connects MCP servers itself (cuca.mcp)",
    "context_management": "cuca compacts with a Compactor",
    "cache_control": "cuca marks the last block of a message, the system prompt or the last tool",
    "citations": "cuca's blocks carry no citations",
    "output_format": "the older spelling of output_config.format",
    "effort": "cuca sends an effort with adaptive thinking only",
}
"""What cuca says about a field it has no place for, by the field's name."""


def _prompt_cache(system: bool, tools: bool, messages: list[int]) -> PromptCache | None:
    if not (system or tools or messages):
        return None
    return PromptCache(system=system, tools=tools, messages=tuple(messages))


def _cached(block: Body) -> bool:
    """Whether ``block`` carries a ``cache_control`` breakpoint (read: it is carried)."""
    control = block.object("cache_control")
    if control is None:
        return False
    if control.text("type") != "ephemeral":
        raise ConfigurationError(f"{control.at('type')} must be ephemeral")
    control.default("ttl", "5m", "cuca's breakpoints last five minutes")
    return True


def _last_cached(blocks: list[Body]) -> bool:
    """Whether the last of ``blocks`` is a breakpoint; any other is left unread (a
    strict body refuses it: cuca places one only after the last)."""
    return bool(blocks) and _cached(blocks[-1])


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
    choice.default("disable_parallel_tool_use", False, "the model may call several tools at once")
    if kind == "tool":
        return ToolChoice.tool(choice.text("name", required=True) or "")
    if kind not in _CHOICES:
        raise ConfigurationError(f"tool_choice.type must be auto, any, none or tool, not {kind!r}")
    return _CHOICES[kind]


@attrs.frozen
class _System:
    text: str
    cached: bool = False


def _system_text(top: Body) -> _System:
    """The ``system`` prompt, and whether it ends in a cache breakpoint."""
    value = top.get("system", str, list, what="a string or an array of text blocks")
    if value is None or isinstance(value, str):
        return _System(value or "")
    blocks = top.objects("system")
    return _System("\n".join(_text_block(b) for b in blocks), _last_cached(blocks))


def _text_block(block: Body) -> str:
    kind = block.text("type")
    if kind not in ("text", None):
        raise ConfigurationError(f"{block.at('type')} must be text here, not {kind!r}")
    return block.text("text", required=True) or ""


# -- messages --------------------------------------------------------------------------


def _turn(turn: Body, signatures: Signatures) -> list[tuple[UnifiedMessage, bool]]:
    """The messages one turn stands for, each with whether its last block is a cache
    breakpoint."""
    role = turn.text("role", required=True)
    content = turn.get("content", str, list, required=True, what="a string or an array")
    if role == "system":  # Claude Code puts its reminders here
        text = (
            content
            if isinstance(content, str)
            else "\n".join(_text_block(b) for b in turn.objects("content"))
        )
        return [(UnifiedMessage(MessageRole.SYSTEM, (Text(text),)), False)]
    if role not in ("user", "assistant"):
        raise ConfigurationError(f"{turn.at('role')} must be user or assistant, not {role!r}")
    if isinstance(content, str):
        message_role = MessageRole.USER if role == "user" else MessageRole.ASSISTANT
        return [(UnifiedMessage(message_role, (Text(content),)), False)]
    blocks = turn.objects("content")
    if role == "assistant":
        assistant = [(b, _assistant_block(b, signatures)) for b in blocks]
        kept = [(wire, block) for wire, block in assistant if block]
        content_blocks = tuple(block for _, block in kept if block)
        cached = bool(kept) and _cached(kept[-1][0])
        return [(UnifiedMessage(MessageRole.ASSISTANT, content_blocks), cached)]
    return _user_turn(blocks)


def _user_turn(blocks: list[Body]) -> list[tuple[UnifiedMessage, bool]]:
    """Tool results first, one Tool message each, then the user's own blocks."""
    out: list[tuple[UnifiedMessage, bool]] = []
    rest: list[tuple[Body, Block]] = []
    for block in blocks:
        kind = block.text("type", required=True)
        if kind == "tool_result":
            result = _tool_result(block)
            message = UnifiedMessage(MessageRole.TOOL, (result,), result.tool_call_id)
            out.append((message, _cached(block)))
        elif kind == "text":
            rest.append((block, Text(block.text("text", required=True) or "")))
            block.default("citations", [], "cuca's blocks carry no citations")
        elif kind == "image":
            rest.append((block, _image(block)))
        else:
            raise ConfigurationError(f"{block.at('type')} {kind!r} is not a block cuca reads")
    if rest or not out:
        cached = bool(rest) and _cached(rest[-1][0])
        out.append((UnifiedMessage(MessageRole.USER, tuple(b for _, b in rest)), cached))
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
        block.default("citations", [], "cuca's blocks carry no citations")
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


def _thinking(spec: Body | None, output: Body | None) -> ThinkingConfig | None:
    """``thinking``, with ``output_config.effort`` for adaptive thinking."""
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
    tool.default("strict", False, "cuca's tools have no strict switch")
    return ToolDefinition(tool.text("name", required=True) or "", description, schema)


def _output_schema(output: Body | None) -> OutputSchema | None:
    """``output_config.format``: a JSON Schema (the wire names it not)."""
    spec = output.object("format") if output is not None else None
    if spec is None:
        return None
    if spec.text("type") != "json_schema":
        raise ConfigurationError(f"{spec.at('type')} must be json_schema")
    schema = spec.get("schema", dict, required=True)
    return OutputSchema("output", schema)
