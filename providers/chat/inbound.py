"""A ``/chat/completions`` request body, as a server receives it, read into a
:class:`~cuca.types.UnifiedRequest` (the inverse of :mod:`.encode`).

=======================================  ===========================================
the body                                 the request
=======================================  ===========================================
``system`` / ``developer`` message       a System message (text parts joined)
``user`` message                         a User message: Text, and ImageBase64 for a
                                         ``data:`` image URL (a remote URL is refused)
``assistant`` message                    an Assistant message: its ``reasoning`` (or
                                         the alias ``reasoning_content``) as Thinking,
                                         then its text, then each of ``tool_calls``
``tool`` message                         a Tool message with one ToolResult
``max_completion_tokens``/``max_tokens``  ``max_tokens`` (the first wins)
``reasoning_effort``                     ``thinking``: ``"none"`` off, else on at that
                                         effort (``"max"`` is XHIGH)
``chat_template_kwargs.enable_thinking``  ``thinking`` on or off (vLLM's switch)
``thinking: {"type": ...}``              ``thinking`` on or off (DeepSeek's switch)
``tools`` (functions)                    ``tools``
``response_format``                      ``output_schema``
``stop``, ``seed``, ``top_p``            the same fields
``tool_choice``                          ``tool_choice`` (a named function: one tool)
``stream_options.include_usage``         the usage chunk (:class:`.serving.Inbound`)
``n``, ``logprobs``, ``store``...         nothing, at their default value only
                                         (``n: 1``...); see :func:`_defaults`
=======================================  ===========================================

Assistant reasoning arrives as text with no signature on this wire: it is read as an
unsigned Thinking block, which the local engine puts back in its template at its own
turn (seed 000) and the chat backends echo as ``reasoning_content``. A field of the
wrong type is a :class:`~cuca.errors.ConfigurationError` naming it (the server's 400).
Fields the wire has and cuca does not carry (``user``, ``logit_bias``, ``n: 2``...)
are ignored by the server, as OpenAI-compatible servers ignore what they do not use;
read ``strict`` (``cuca.from_openai``), each is refused naming it.
"""

from __future__ import annotations

from typing import Any

from cuca.errors import ConfigurationError
from cuca.types import (
    Block,
    ImageBase64,
    MessageRole,
    OutputSchema,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingEffort,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

from ..serving import Body, Inbound

__all__ = ["EFFORTS", "decode", "decode_request", "image_block", "parts_text", "tool_choice"]

EFFORTS: dict[str, ThinkingEffort | None] = {
    "none": None,
    "minimal": ThinkingEffort.MINIMAL,
    "low": ThinkingEffort.LOW,
    "medium": ThinkingEffort.MEDIUM,
    "high": ThinkingEffort.HIGH,
    "xhigh": ThinkingEffort.XHIGH,
    "max": ThinkingEffort.XHIGH,
}
"""``reasoning_effort`` values: ``none`` turns thinking off, the others on at an effort."""

_ROLES = ("system", "developer", "user", "assistant", "tool")
_CHOICES = {"auto": ToolChoice.AUTO, "none": ToolChoice.NONE, "required": ToolChoice.REQUIRED}


def decode_request(body: Any) -> UnifiedRequest:
    """The request a ``/chat/completions`` body stands for."""
    return decode(body).request


def decode(body: Any, *, strict: bool = False) -> Inbound:
    """The request a ``/chat/completions`` body stands for, and whether it asks for the
    usage chunk. Raises :class:`~cuca.errors.ConfigurationError` naming the first
    field that is missing or of the wrong type; ``strict``, also the first field cuca
    has no place for (:meth:`.serving.Body.finish`), which the server ignores."""
    top = Body(body, strict=strict)
    model = top.text("model", required=True) or ""
    messages = tuple(_message(m) for m in top.objects("messages", required=True))
    if not messages:
        raise ConfigurationError("messages must hold at least one message")
    stream = bool(top.boolean("stream"))
    options = top.object("stream_options")
    include_usage = bool(options.boolean("include_usage")) if options is not None else False
    request = UnifiedRequest(
        model=model,
        messages=messages,
        temperature=top.number("temperature"),
        max_tokens=_max_tokens(top),
        stream=stream,
        thinking=_thinking(top),
        tools=tuple(_tool(t) for t in top.objects("tools")),
        output_schema=_output_schema(top.object("response_format")),
        stop=_stop(top, "stop"),
        seed=top.integer("seed"),
        top_p=top.number("top_p"),
        tool_choice=tool_choice(top),
    )
    _defaults(top)
    top.finish(_HINTS)
    return Inbound(request, include_usage=include_usage and stream)


def _max_tokens(top: Body) -> int | None:
    """``max_completion_tokens``, else the older ``max_tokens``; on a strict body two
    different values are refused (one would be lost)."""
    newer = top.integer("max_completion_tokens", minimum=1)
    older = top.integer("max_tokens", minimum=1)
    if top.strict and None not in (newer, older) and newer != older:
        raise ConfigurationError(
            f"max_completion_tokens ({newer}) and max_tokens ({older}) disagree: send one"
        )
    return older if newer is None else newer


def _defaults(top: Body) -> None:
    """The knobs cuca takes at their default value only: at it, they ask for nothing
    cuca does not do."""
    top.default("n", 1, "one answer per turn")
    top.default("logprobs", False, "no log probabilities")
    top.default("parallel_tool_calls", True, "the model may call several tools at once")
    top.default("frequency_penalty", 0, "no penalties")
    top.default("presence_penalty", 0, "no penalties")
    top.default("modalities", ["text"], "text out")
    top.default("store", False, "nothing stored with the vendor")


_HINTS = {
    "user": "an end user's id is the vendor's own",
    "safety_identifier": "an end user's id is the vendor's own",
    "metadata": "tags stored with the vendor",
    "service_tier": "a vendor's billing knob",
    "logit_bias": "a vendor's token ids",
    "top_logprobs": "cuca returns no log probabilities",
    "verbosity": "a vendor's knob",
    "prompt_cache_key": "OpenAI's cache routing; cuca's prompt_cache places breakpoints",
    "audio": "cuca has no audio",
    "prediction": "a vendor's knob",
    "web_search_options": "a vendor's hosted tool",
    "functions": "the deprecated form of tools",
    "function_call": "the deprecated form of tool_choice",
    "name": "a participant's name",
    "refusal": "cuca reads a refusal part of content as text",
    "strict": "cuca's tools have no strict switch",
    "description": "an output schema has a name and a schema",
    "detail": "an image's resolution hint",
}
"""What cuca says about a field it has no place for, by the field's name."""


def _stop(top: Body, key: str) -> tuple[str, ...]:
    value = top.get(key, str, list, what="a string or an array of strings")
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{top.at(key)} must hold strings only")
    return tuple(value)


def tool_choice(top: Body) -> ToolChoice | None:
    """``tool_choice``: ``"auto"``, ``"none"``, ``"required"``, or a named function
    (``{"type": "function", "function": {"name"}}``, or the Responses form with
    ``name`` at the top)."""
    value = top.get("tool_choice", str, dict, what="a string or an object")
    if value is None:
        return None
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise ConfigurationError(f"tool_choice must be auto, none or required, not {value!r}")
        return _CHOICES[value]
    choice = top.object("tool_choice")
    assert choice is not None
    kind = choice.text("type")
    if kind not in ("function", None):
        raise ConfigurationError(f"tool_choice.type {kind!r} is not one cuca reads: function")
    function = choice.object("function")
    name = function.text("name") if function is not None else choice.text("name")
    if not name:
        raise ConfigurationError("tool_choice names no function")
    return ToolChoice.tool(name)


# -- messages --------------------------------------------------------------------------


def _message(message: Body) -> UnifiedMessage:
    role = message.text("role", required=True)
    if role not in _ROLES:
        raise ConfigurationError(
            f"{message.at('role')} must be one of {', '.join(_ROLES)}, not {role!r}"
        )
    if role in ("system", "developer"):
        return UnifiedMessage(MessageRole.SYSTEM, (Text(parts_text(message, "content")),))
    if role == "user":
        return UnifiedMessage(MessageRole.USER, _user_content(message))
    if role == "tool":
        call_id = message.text("tool_call_id", required=True) or ""
        result = ToolResult(call_id, parts_text(message, "content"))
        name = message.text("name")  # the function's (what Gemini matches results by)
        return UnifiedMessage(MessageRole.TOOL, (result,), tool_call_id=call_id, name=name)
    return UnifiedMessage(MessageRole.ASSISTANT, _assistant_content(message))


def parts_text(message: Body, key: str) -> str:
    """A content that is a string, null, or a list of text parts, as one string (the
    parts joined as they are: they are pieces of one text)."""
    value = message.get(key, str, list, what="a string or an array of content parts")
    if value is None or isinstance(value, str):
        return value or ""
    texts: list[str] = []
    for part in message.objects(key):
        kind = part.text("type")
        if kind not in ("text", "input_text", "output_text", "refusal", None):
            raise ConfigurationError(f"{part.at('type')} {kind!r} cannot be read here as text")
        texts.append(part.text("text") or part.text("refusal") or "")
    return "".join(texts)


def _user_content(message: Body) -> tuple[Block, ...]:
    value = message.get("content", str, list, what="a string or an array of content parts")
    if value is None or isinstance(value, str):
        return (Text(value or ""),)
    blocks: list[Block] = []
    for part in message.objects("content"):
        kind = part.text("type", required=True)
        if kind in ("text", "input_text"):
            blocks.append(Text(part.text("text", required=True) or ""))
        elif kind == "image_url":
            image = part.object("image_url", required=True)
            assert image is not None
            image.default("detail", "auto", "the vendor picks the resolution")
            blocks.append(image_block(image.text("url", required=True) or "", image.at("url")))
        else:
            raise ConfigurationError(f"{part.at('type')} {kind!r} is not a part cuca reads")
    return tuple(blocks)


def image_block(url: str, where: str) -> ImageBase64:
    """An image given as a ``data:`` URL; any other URL is refused (the server fetches
    nothing on a client's behalf)."""
    head, sep, data = url.partition(",")
    if not (head.startswith("data:") and head.endswith(";base64") and sep):
        raise ConfigurationError(f"{where} must be a base64 data: URL (no remote images)")
    return ImageBase64(head[len("data:") : -len(";base64")], data)


def _assistant_content(message: Body) -> tuple[Block, ...]:
    blocks: list[Block] = []
    reasoning = message.text("reasoning")
    alias = message.text("reasoning_content")
    if message.strict and reasoning and alias and reasoning != alias:
        raise ConfigurationError(
            f"{message.at('reasoning')} and {message.at('reasoning_content')} disagree: send one"
        )
    if reasoning is None:
        reasoning = alias
    if reasoning:
        blocks.append(Thinking(reasoning))
    text = parts_text(message, "content")
    if text:
        blocks.append(Text(text))
    for call in message.objects("tool_calls"):
        blocks.append(_tool_call(call))
    return tuple(blocks)


def _tool_call(call: Body) -> ToolCall:
    call_id = call.text("id", required=True) or ""
    if call.text("type") not in ("function", None):
        raise ConfigurationError(f"{call.at('type')} must be function")
    function = call.object("function", required=True)
    assert function is not None
    name = function.text("name", required=True) or ""
    arguments = function.get("arguments", str, dict, what="a JSON object or its text")
    try:
        return ToolCall(call_id, name, arguments)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{function.at('arguments')}: {exc.message}") from None


# -- the rest of the request -----------------------------------------------------------


def _thinking(top: Body) -> ThinkingConfig | None:
    if top.strict:
        keys = ("reasoning_effort", "chat_template_kwargs", "thinking")
        switches = [k for k in keys if top.value.get(k) is not None]
        if len(switches) > 1:
            raise ConfigurationError(f"{' and '.join(switches)} each set thinking: send one")
    effort = top.text("reasoning_effort")
    if effort is not None:
        if effort not in EFFORTS:
            names = ", ".join(EFFORTS)
            raise ConfigurationError(f"reasoning_effort must be one of {names}, not {effort!r}")
        level = EFFORTS[effort]
        return ThinkingConfig.off() if level is None else ThinkingConfig(True, level)
    kwargs = top.object("chat_template_kwargs")
    switch = kwargs.boolean("enable_thinking") if kwargs is not None else None
    if switch is not None:
        return ThinkingConfig(enabled=switch)
    mode = top.object("thinking")
    if mode is not None:
        kind = mode.text("type")
        if kind not in ("enabled", "disabled"):
            raise ConfigurationError(f"thinking.type must be enabled or disabled, not {kind!r}")
        return ThinkingConfig(enabled=kind == "enabled")
    return None


def _tool(tool: Body) -> ToolDefinition:
    kind = tool.text("type")
    if kind not in ("function", None):
        raise ConfigurationError(f"{tool.at('type')} {kind!r}: only function tools are served")
    function = tool.object("function", required=True)
    assert function is not None
    schema = function.get("parameters", dict) or {"type": "object", "properties": {}}
    description = function.text("description") or ""
    function.default("strict", False, "cuca's tools have no strict switch")
    return ToolDefinition(function.text("name", required=True) or "", description, schema)


def _output_schema(spec: Body | None) -> OutputSchema | None:
    if spec is None:
        return None
    kind = spec.text("type")
    if kind == "text" or kind is None:
        return None
    if kind == "json_object":
        return OutputSchema("output", {"type": "object"}, strict=False)
    if kind != "json_schema":
        raise ConfigurationError(f"response_format.type {kind!r} is not one cuca serves")
    schema = spec.object("json_schema", required=True)
    assert schema is not None
    strict = schema.boolean("strict")
    return OutputSchema(
        schema.text("name") or "output",
        schema.get("schema", dict) or {"type": "object"},
        strict=bool(strict),
    )
