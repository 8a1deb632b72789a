"""A model's chat template: a request in, the prompt text out.

:class:`ChatTemplate` renders a :class:`~cuca.types.UnifiedRequest` through the jinja2
template a GGUF file carries, with the variables Hugging Face transformers passes
(``messages``, ``tools``, ``add_generation_prompt``, ``bos_token``, ``eos_token``) plus
``enable_thinking``, ``thinking`` and ``preserve_thinking``, inside the bounded sandbox
of :mod:`engine.sandbox`, with what llama.cpp's renderer adds
(:mod:`engine.llamacpp_compat`: today's date, FireFunction's variables, system text
folded for templates without a system role). From the same template it derives what
the output parser needs (:meth:`ChatTemplate.output_format`) and what the model
supports (:meth:`ChatTemplate.capabilities`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from cuca.errors import ConfigurationError, TemplateError
from cuca.types import (
    ImageBase64,
    MessageRole,
    Text,
    Thinking,
    ToolCall,
    ToolDefinition,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

from .families import Family, detect_family, ends_in_reasoning, find_markers
from .formats import Capabilities, OutputFormat, RenderedTurn, ToolSyntax
from .llamacpp_compat import SYSTEM_PROBE, extra_variables, fold_system, message_adjuster
from .sandbox import ChatSandbox, Limits

__all__ = ["ChatTemplate", "ToolArguments", "template_variables", "thinking_enabled"]


# -- request -> template variables ----------------------------------------------------


def _plain_json(value: Any, what: str) -> Any:
    """A deep copy made of plain dicts and lists, so a template cannot touch the request."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{what} is not JSON: {exc}") from None


class ToolArguments(dict[str, Any]):
    """Tool-call arguments as the template sees them: a JSON object.

    It is a plain ``dict`` to the template (``is mapping``, ``| tojson``, ``.items()``),
    but a template written for string arguments (``'...' + arguments``, as in
    functionary v3.2) gets the object's compact JSON text, as llama.cpp writes it,
    instead of a type error.
    """

    def __add__(self, other: Any) -> Any:
        if isinstance(other, str):
            return self.text() + other
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other + self.text()
        return NotImplemented

    def text(self) -> str:
        """The object as llama.cpp writes it where a template joins it to a string:
        compact JSON, ``{"city":"Rome"}``."""
        return json.dumps(self, ensure_ascii=False, separators=(",", ":"))


def _arguments(call: ToolCall) -> ToolArguments:
    """The call's arguments as a plain object (the constructor already read a string or
    ``None``); a value JSON cannot hold is a ``ConfigurationError``."""
    return ToolArguments(call.arguments_object())


IdMap = Callable[[str], str]


def _same_id(call_id: str) -> str:
    return call_id


def mistral_call_id(call_id: str) -> str:
    """A call id as Mistral's templates demand it: 9 alphanumeric characters.

    Ids that already fit are kept; others (``call_`` + 16 hex from the engine, any
    provider's) map to a stable digest, so a call and its result still match.
    """
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def _tool_call(call: ToolCall, ids: IdMap) -> dict[str, Any]:
    function = {"name": call.name, "arguments": _arguments(call)}
    return {"id": ids(call.id), "type": "function", "function": function}


def _joined(blocks: tuple[Any, ...], kind: type[Text] | type[ToolResult]) -> str:
    if kind is ToolResult:
        return "\n".join(b.output for b in blocks if isinstance(b, ToolResult))
    return "\n".join(b.text for b in blocks if isinstance(b, Text))


def _message(index: int, message: UnifiedMessage, ids: IdMap) -> dict[str, Any]:
    if any(isinstance(block, ImageBase64) for block in message.content):
        raise ConfigurationError(f"the local engine is text only: message {index} has an image")
    role = message.role
    if role is MessageRole.TOOL:
        results = [b for b in message.content if isinstance(b, ToolResult)]
        out: dict[str, Any] = {"role": "tool", "content": _joined(message.content, ToolResult)}
        call_id = message.tool_call_id or (results[0].tool_call_id if results else None)
        if call_id is not None:
            out["tool_call_id"] = ids(call_id)
        if message.name is not None:
            out["name"] = message.name
        return out
    out = {"role": role.value, "content": _joined(message.content, Text)}
    if role is MessageRole.ASSISTANT:
        thinking = [b.text for b in message.content if isinstance(b, Thinking)]
        calls = [_tool_call(b, ids) for b in message.content if isinstance(b, ToolCall)]
        if thinking:
            out["reasoning_content"] = "".join(thinking)
        if calls:
            out["tool_calls"] = calls
    return out


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    parameters = _plain_json(dict(tool.input_schema), f"tool {tool.name} input_schema")
    function = {"name": tool.name, "description": tool.description, "parameters": parameters}
    return {"type": "function", "function": function}


def thinking_enabled(request: UnifiedRequest) -> bool:
    """True iff the request sets thinking and enables it."""
    return request.thinking is not None and request.thinking.enabled


def template_variables(
    request: UnifiedRequest,
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    call_ids: IdMap = _same_id,
) -> dict[str, Any]:
    """The variables a chat template sees for ``request``; ``call_ids`` rewrites tool
    call ids for families that constrain them (Mistral).

    Raises :class:`~cuca.errors.ConfigurationError` for what the local engine cannot
    send: an image, or tool-call arguments that are not a JSON object.
    """
    thinking = thinking_enabled(request)
    variables: dict[str, Any] = {
        "messages": [_message(i, m, call_ids) for i, m in enumerate(request.messages)],
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
        "enable_thinking": thinking,
        "thinking": thinking,
        "preserve_thinking": False,
    }
    if request.tools:
        variables["tools"] = [_tool(t) for t in request.tools]
    return variables


def _text_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return sum(_text_size(k) + _text_size(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(_text_size(v) for v in value)
    return 8


def _suffix(full: str, prefix: str) -> str:
    """What ``full`` adds to ``prefix``: the part after their longest common prefix."""
    if full.startswith(prefix):
        return full[len(prefix) :]
    common = 0
    for a, b in zip(full, prefix, strict=False):
        if a != b:
            break
        common += 1
    return full[common:]


_PROBE = UnifiedRequest.new("probe").add_user_message("Hello").set_thinking(True)
_SYSTEM_PROBE = UnifiedRequest.new("probe").add_system_message(SYSTEM_PROBE).add_user_message("Hey")


# -- the template ---------------------------------------------------------------------


class ChatTemplate:
    """A compiled chat template.

    ``bos_token`` and ``eos_token`` are the model's special tokens as text. ``limits``
    bounds each rendering (see :class:`~engine.sandbox.Limits`); ``clock`` is what
    ``strftime_now`` and the date variables read (``datetime.now`` by default; tests
    pin it). Raises :class:`~cuca.errors.TemplateError` if ``source`` is not a valid
    template.
    """

    def __init__(
        self,
        source: str,
        *,
        bos_token: str = "",
        eos_token: str = "",
        limits: Limits | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._sandbox = ChatSandbox(limits, clock)
        self._template, self._reads = self._sandbox.compile_template(source)
        self.family: Family = detect_family(source)
        self._capabilities: Capabilities | None = None
        self._system_role: bool | None = None
        self._adjust = message_adjuster(source)

    def __repr__(self) -> str:
        return f"<ChatTemplate family={self.family.name} {len(self.source)} chars>"

    def reads(self, variable: str) -> bool:
        """Whether the template reads ``variable`` from its context (e.g. ``enable_thinking``)."""
        return variable in self._reads

    def _variables(
        self, request: UnifiedRequest, add_generation_prompt: bool, *, fold: bool = True
    ) -> dict[str, Any]:
        variables = template_variables(
            request,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            call_ids=mistral_call_id if self.family.tool_syntax is ToolSyntax.MISTRAL else _same_id,
        )
        now = self._sandbox.clock()
        variables.update(extra_variables(self.reads, now, variables.get("tools")))
        messages = variables["messages"]
        if fold and any(m["role"] == "system" for m in messages) and not self.has_system_role():
            variables["messages"] = messages = fold_system(messages)
        if self._adjust is not None:
            variables["messages"] = self._adjust(messages)
        return variables

    def has_system_role(self) -> bool:
        """Whether a system message reaches the prompt, as llama.cpp tests it: a
        ``[system, user]`` conversation renders without error and shows the system text.
        Without one, system text is folded into the next user turn. Never raises."""
        if self._system_role is None:
            variables = self._variables(_SYSTEM_PROBE, False, fold=False)
            try:
                rendered = self.render_variables(variables)
            except TemplateError:
                rendered = ""
            self._system_role = SYSTEM_PROBE in rendered
        return self._system_role

    def variables(
        self, request: UnifiedRequest, *, add_generation_prompt: bool = True
    ) -> dict[str, Any]:
        """What the template sees for ``request`` (a fresh copy each call).

        Raises :class:`~cuca.errors.ConfigurationError` for a request the engine cannot
        send.
        """
        return self._variables(request, add_generation_prompt)

    def render_variables(self, variables: dict[str, Any]) -> str:
        """Render the template with exactly ``variables`` (see :meth:`variables`); raises
        :class:`~cuca.errors.TemplateError` like :meth:`render`."""
        size = _text_size(variables)
        return self._sandbox.render_template(self._template, variables, input_chars=size)

    def render(self, request: UnifiedRequest, *, add_generation_prompt: bool = True) -> str:
        """The prompt for ``request``.

        Raises :class:`~cuca.errors.ConfigurationError` for a request the engine cannot
        send and :class:`~cuca.errors.TemplateError` for any failure of the template,
        including its own ``raise_exception``.
        """
        return self.render_variables(self._variables(request, add_generation_prompt))

    def render_turn(self, request: UnifiedRequest) -> RenderedTurn:
        """The prompt for ``request`` and the format of the output that follows it, from
        one rendering: the generation prompt is what the template writes after it last
        tests ``add_generation_prompt`` (see :class:`~engine.sandbox.GenerationFlag`).

        Raises like :meth:`render`.
        """
        variables = self._variables(request, True)
        size = _text_size(variables)
        text, start = self._sandbox.render_with_generation_prompt(
            self._template, variables, input_chars=size
        )
        return RenderedTurn(text, self._format(text[start:]))

    def generation_prompt(self, request: UnifiedRequest) -> str:
        """What ``add_generation_prompt`` appends to the rendered conversation, found by
        rendering twice and comparing (the reference :meth:`render_turn` is checked
        against in the tests)."""
        with_prompt = self.render(request, add_generation_prompt=True)
        return _suffix(with_prompt, self.render(request, add_generation_prompt=False))

    def output_format(self, request: UnifiedRequest | None = None) -> OutputFormat:
        """What to look for in the output: reasoning markers, tool syntax, and whether
        generation for ``request`` starts inside a reasoning block (the generation prompt
        leaves one open). Without a request, a one-message conversation with thinking
        unset stands in for it.
        """
        if request is None:
            request = _PROBE.set_thinking(None)
        return self.render_turn(request).output_format

    def _format(self, generation_prompt: str) -> OutputFormat:
        markers = self.family.reasoning or find_markers(generation_prompt)
        opened = markers is not None and ends_in_reasoning(generation_prompt, markers)
        return OutputFormat(markers, self.family.tool_syntax, opened)

    def capabilities(self) -> Capabilities:
        """What the model supports, read from its template (never raises)."""
        if self._capabilities is None:
            self._capabilities = Capabilities(
                reasoning=self.family.reasoning is not None or self._probe_opens_reasoning(),
                can_disable_thinking=self.reads("enable_thinking"),
                tools=self.family.tool_syntax is not None,
            )
        return self._capabilities

    def _probe_opens_reasoning(self) -> bool:
        try:
            return self.output_format(_PROBE).starts_in_thinking
        except (TemplateError, ConfigurationError):
            return False
