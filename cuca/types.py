"""The unified types: one request shape in, one stream of typed blocks out.

These are the narrowest shapes every backend agrees on. They know nothing about any
vendor's JSON: every remaining difference lives in a provider adapter. All classes are
frozen; the fluent helpers on :class:`UnifiedRequest` return new instances.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

import attrs

from ._checks import int_in, kind, of_type, optional, positive_int, real_in
from ._prices import price
from ._typeschema import json_schema_of
from .errors import ConfigurationError

if TYPE_CHECKING:
    from datetime import datetime
    from decimal import Decimal

__all__ = [
    "AnthropicThinkingParams",
    "Block",
    "CompactionReport",
    "CompactionStep",
    "FinishReason",
    "GeminiThinkingParams",
    "ImageBase64",
    "MessageRole",
    "ModelInfo",
    "OpenAiThinkingParams",
    "OutputSchema",
    "PromptCache",
    "PromptCacheUsage",
    "ProviderEndpoint",
    "Text",
    "Thinking",
    "ThinkingConfig",
    "ThinkingEffort",
    "ThinkingParams",
    "TokenCount",
    "TokenUsage",
    "ToolCall",
    "ToolChoice",
    "ToolChoiceMode",
    "ToolDefinition",
    "ToolResult",
    "TurnSummary",
    "UnifiedMessage",
    "UnifiedRequest",
    "UnifiedResponse",
]


@attrs.frozen(repr=False)
class ProviderEndpoint:
    """Which backend a client talks to.

    The built-in endpoints are class attributes (``ProviderEndpoint.OPENAI``...).
    ``ProviderEndpoint.custom(name)`` names a gateway cuca has no adapter for; dispatching
    it fails with ``configuration error: custom endpoints require a registered adapter,
    and none is registered for '<name>'``, because guessing its protocol would send a
    malformed request to a real server. The one way through is an adapter you wrote,
    registered with :func:`cuca.register_adapter` under that name.
    """

    kind: str
    custom_name: str = ""

    OPENAI: ClassVar[ProviderEndpoint]
    ANTHROPIC: ClassVar[ProviderEndpoint]
    GOOGLE_GEMINI: ClassVar[ProviderEndpoint]
    DEEPSEEK: ClassVar[ProviderEndpoint]
    LLAMA_CPP: ClassVar[ProviderEndpoint]
    VLLM: ClassVar[ProviderEndpoint]
    LM_STUDIO: ClassVar[ProviderEndpoint]
    LOCAL: ClassVar[ProviderEndpoint]
    BUILTIN: ClassVar[tuple[str, ...]] = (
        "openai",
        "anthropic",
        "google_gemini",
        "deepseek",
        "llama_cpp",
        "vllm",
        "lm_studio",
        "local",
    )
    """The built-in endpoints' kinds, in the order the docs and the command list them
    (each is a constant below, ``ProviderEndpoint.OPENAI``...; the provider table,
    :mod:`cuca.providers.table`, has one row per kind)."""
    ALIASES: ClassVar[Mapping[str, str]] = {
        "gemini": "google_gemini",
        "llamacpp": "llama_cpp",
        "lmstudio": "lm_studio",
    }
    """Other spellings :meth:`parse` accepts besides each kind (dashes for underscores, in
    any case, are accepted too)."""

    @classmethod
    def custom(cls, name: str) -> ProviderEndpoint:
        """A named endpoint with no built-in adapter: it fails to dispatch unless an
        adapter was registered for ``name``."""
        return cls("custom", name)

    @classmethod
    def parse(cls, value: str) -> ProviderEndpoint:
        """The endpoint named by ``value`` (``"openai"``, ``"llama_cpp"``, ``"custom:x"``)."""
        if value.strip().lower().startswith("custom:"):
            return cls.custom(value.split(":", 1)[1])
        name = value.strip().lower().replace("-", "_")
        found = name if name in cls.BUILTIN else cls.ALIASES.get(name)
        if found is None:
            names = ", ".join(cls.BUILTIN)
            raise ConfigurationError(f"unknown provider {value!r} (one of {names}, or custom:NAME)")
        return cls(found)

    @property
    def is_custom(self) -> bool:
        return self.kind == "custom"

    def __str__(self) -> str:
        return f"custom:{self.custom_name}" if self.is_custom else self.kind

    def __repr__(self) -> str:
        if self.is_custom:
            return f"ProviderEndpoint.custom({self.custom_name!r})"
        return f"ProviderEndpoint.{self.kind.upper()}"


ProviderEndpoint.OPENAI = ProviderEndpoint("openai")
ProviderEndpoint.ANTHROPIC = ProviderEndpoint("anthropic")
ProviderEndpoint.GOOGLE_GEMINI = ProviderEndpoint("google_gemini")
ProviderEndpoint.DEEPSEEK = ProviderEndpoint("deepseek")
ProviderEndpoint.LLAMA_CPP = ProviderEndpoint("llama_cpp")
ProviderEndpoint.VLLM = ProviderEndpoint("vllm")
ProviderEndpoint.LM_STUDIO = ProviderEndpoint("lm_studio")
ProviderEndpoint.LOCAL = ProviderEndpoint("local")


class MessageRole(enum.Enum):
    """Who speaks a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"

    def __str__(self) -> str:
        return self.value


# -- content blocks ------------------------------------------------------------------


@attrs.frozen
class Text:
    """A piece of answer text.

    In a stream each Text is a delta to append. ``signature`` carries opaque provider
    data that arrived on this part (a Gemini ``thoughtSignature``, even on an empty text
    part), replayed only to ``provider``.
    """

    text: str
    signature: str | None = None
    provider: ProviderEndpoint | None = None


@attrs.frozen
class ImageBase64:
    """An image sent to the model, base64-encoded (``data``), with its MIME type."""

    media_type: str
    data: str


@attrs.frozen
class Thinking:
    """Reasoning text.

    ``signature`` is the opaque proof some providers attach (Anthropic thinking
    signatures, Gemini thought signatures), ``provider`` the endpoint that issued it:
    a signed Thinking block is replayed only to that provider. ``redacted`` marks an
    Anthropic ``redacted_thinking`` block, whose encrypted payload rides in ``signature``.
    ``id`` is the provider's id of the reasoning item (OpenAI's Responses API names each
    one, and takes it back with its ``encrypted_content`` in ``signature``).
    """

    text: str
    signature: str | None = None
    provider: ProviderEndpoint | None = None
    redacted: bool = False
    id: str | None = None


def tool_arguments(value: Mapping[str, Any] | str | None) -> Mapping[str, Any]:
    """Tool-call arguments as a JSON object, from what seed 000 accepts.

    Seed 000: "An object, null or a string holding an object is accepted; anything else
    fails the request". An object is kept as it is; ``None`` is ``{}``; a string holding a
    JSON object (what the openai SDK hands out) is parsed. Anything else is refused, the
    empty or blank string too (it holds no object).
    """
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            raise ConfigurationError(
                f"ToolCall.arguments is a string that holds no JSON object: {kind(value)}"
            )
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            raise ConfigurationError(
                f"ToolCall.arguments is a string that is not JSON: {kind(value)}"
            ) from None
        if not isinstance(parsed, Mapping):
            raise ConfigurationError(
                f"ToolCall.arguments is a string that holds no JSON object: {kind(value)}"
            )
        return parsed
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            "ToolCall.arguments must be a JSON object (a dict), None, or a string holding "
            f"a JSON object, not {kind(value)}"
        )
    return value


@attrs.frozen
class ToolCall:
    """A complete call of a declared tool: ``arguments`` is always a JSON object.

    The constructor takes what seed 000 accepts: a mapping, ``None`` (no arguments) or a
    string holding a JSON object, and stores the object; anything else raises
    :class:`~cuca.errors.ConfigurationError`. ``signature`` is opaque provider data
    riding on the call (a Gemini ``thoughtSignature``), replayed only to ``provider``.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict, hash=False, converter=tool_arguments)
    signature: str | None = None
    provider: ProviderEndpoint | None = None

    def arguments_json(self) -> str:
        """The arguments as JSON text (how the OpenAI wire carries them).

        Raises :class:`~cuca.errors.ConfigurationError` when a value inside cannot be
        JSON (a ``set``, ``bytes``, a ``datetime``, ``NaN``...): every encoder refuses
        such a call instead of failing inside the transport.
        """
        try:
            return json.dumps(dict(self.arguments), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ConfigurationError(
                f"tool call {self.id!r} ({self.name}) arguments are not JSON: {exc}"
            ) from None

    def arguments_object(self) -> dict[str, Any]:
        """The arguments as a plain JSON object (a deep copy), checked as by
        :meth:`arguments_json`."""
        parsed: dict[str, Any] = json.loads(self.arguments_json())
        return parsed


@attrs.frozen
class ToolResult:
    """The output of a tool call, sent back to the model in a Tool message."""

    tool_call_id: str
    output: str
    is_error: bool = False


def new_call_id() -> str:
    """A fresh tool-call id for a call whose provider sent none: ``call_`` and 16
    hexadecimal digits."""
    import secrets  # on first use: it is not needed to import cuca

    return "call_" + secrets.token_hex(8)


Block: TypeAlias = Text | ImageBase64 | Thinking | ToolCall | ToolResult
"""One content block of a message or of a stream."""

BLOCK_TYPES: tuple[type, ...] = (Text, ImageBase64, Thinking, ToolCall, ToolResult)


_BLOCK_TEXT_FIELDS: dict[type, tuple[str, ...]] = {
    Text: ("text",),
    Thinking: ("text",),
    ImageBase64: ("media_type", "data"),
    ToolCall: ("id", "name"),
    ToolResult: ("tool_call_id", "output"),
}


def _block(value: object) -> Block:
    """One block of a message: a block whose text fields are strings, or a ``str``
    (a Text block)."""
    if isinstance(value, str):
        return Text(value)
    if not isinstance(value, BLOCK_TYPES):
        raise ConfigurationError(
            "a message holds blocks (Text, ImageBase64, Thinking, ToolCall, ToolResult) "
            f"or strings, not {kind(value)}"
        )
    for field in _BLOCK_TEXT_FIELDS[type(value)]:
        inner = getattr(value, field)
        if not isinstance(inner, str):
            name = type(value).__name__
            raise ConfigurationError(f"{name}.{field} must be a string, not {kind(inner)}")
    return value  # type: ignore[return-value]


CONTENT_FORMS = (
    "a string, a block (Text, ImageBase64, Thinking, ToolCall, ToolResult), "
    "or a list of strings and blocks"
)
"""The forms message content takes, as a refusal names them."""


def _content(value: str | Block | Iterable[Block | str]) -> tuple[Block, ...]:
    """A message's content as blocks, from one of :data:`CONTENT_FORMS`.

    A mapping (a vendor-shaped part such as ``{"type": "text", "text": ...}``), bytes
    and a set are refused: iterated, a dict gives its keys, bytes their integers and a
    set no order, so each would reach the model as something the user never wrote.
    """
    if isinstance(value, str | Text | ImageBase64 | Thinking | ToolCall | ToolResult):
        return (_block(value),)
    if isinstance(value, Mapping | bytes | bytearray | memoryview | set | frozenset):
        hint = ""
        if isinstance(value, Mapping):
            hint = ": a vendor-shaped part is not read, write its text as a string or Text(...)"
        elif not isinstance(value, set | frozenset):
            hint = ": decode bytes to a string first"
        raise ConfigurationError(f"message content is {CONTENT_FORMS}, not {kind(value)}{hint}")
    try:
        items = tuple(value)
    except TypeError:
        raise ConfigurationError(f"message content is {CONTENT_FORMS}, not {kind(value)}") from None
    return tuple(_block(item) for item in items)


@attrs.frozen
class UnifiedMessage:
    """One message of a conversation: a role and a tuple of blocks."""

    role: MessageRole = attrs.field(validator=of_type(MessageRole, what="a MessageRole"))
    content: tuple[Block, ...] = attrs.field(converter=_content, default=())
    tool_call_id: str | None = attrs.field(
        default=None, validator=optional(of_type(str, what="a string"))
    )
    name: str | None = attrs.field(default=None, validator=optional(of_type(str, what="a string")))

    def text(self) -> str:
        """The message's Text blocks joined with newlines (how most wires carry it)."""
        return "\n".join(b.text for b in self.content if isinstance(b, Text))


# -- request configuration -----------------------------------------------------------


@attrs.frozen
class ToolDefinition:
    """A tool the model may call; ``input_schema`` is a JSON Schema object."""

    name: str = attrs.field(validator=of_type(str, what="a string"))
    description: str = attrs.field(default="", validator=of_type(str, what="a string"))
    input_schema: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}},
        hash=False,
        validator=of_type(Mapping, what="a JSON Schema object (a dict)"),
    )


class ThinkingEffort(enum.Enum):
    """How hard a reasoning model should think, translated per provider."""

    MINIMAL = "minimal"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    XHIGH = "xhigh"


_OPTIONAL_INT = optional(of_type(int, what="an integer"))
_OPTIONAL_STR = optional(of_type(str, what="a string"))


def _budget_or_not(instance: AnthropicThinkingParams, attribute: Any, value: bool) -> None:
    if value and (instance.budget_tokens is not None or instance.effort is not None):
        raise ConfigurationError(
            "AnthropicThinkingParams takes without_budget=True alone, "
            "not with budget_tokens or effort"
        )


@attrs.frozen
class AnthropicThinkingParams:
    """A native Anthropic override: a budget (``budget_tokens``) or adaptive ``effort``;
    or, with ``without_budget=True``, the bare opt-in ``{"type": "enabled"}`` that
    gateways such as LocalAI take (seed 004), alone."""

    budget_tokens: int | None = attrs.field(default=None, validator=_OPTIONAL_INT)
    effort: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)
    without_budget: bool = attrs.field(
        default=False, validator=[of_type(bool, what="True or False"), _budget_or_not]
    )


def _not_both(instance: GeminiThinkingParams, attribute: Any, value: Any) -> None:
    if instance.thinking_budget is not None and instance.thinking_level is not None:
        raise ConfigurationError(
            "GeminiThinkingParams takes thinking_budget or thinking_level, not both"
        )


@attrs.frozen
class GeminiThinkingParams:
    """A native Gemini override: ``thinking_budget`` or ``thinking_level``, never both."""

    thinking_budget: int | None = attrs.field(default=None, validator=_OPTIONAL_INT)
    thinking_level: str | None = attrs.field(default=None, validator=[_OPTIONAL_STR, _not_both])


@attrs.frozen
class OpenAiThinkingParams:
    """A native OpenAI-compatible override of ``reasoning_effort``."""

    reasoning_effort: str = attrs.field(validator=of_type(str, what="a string"))


ThinkingParams: TypeAlias = AnthropicThinkingParams | GeminiThinkingParams | OpenAiThinkingParams


@attrs.frozen
class ThinkingConfig:
    """Reasoning on or off, at a unified ``effort``; a set ``params`` override wins."""

    enabled: bool = attrs.field(default=True, validator=of_type(bool, what="True or False"))
    effort: ThinkingEffort | None = attrs.field(
        default=None, validator=optional(of_type(ThinkingEffort, what="a ThinkingEffort"))
    )
    params: ThinkingParams | None = attrs.field(
        default=None,
        validator=optional(
            of_type(
                AnthropicThinkingParams,
                GeminiThinkingParams,
                OpenAiThinkingParams,
                what="AnthropicThinkingParams, GeminiThinkingParams or OpenAiThinkingParams",
            )
        ),
    )

    @classmethod
    def off(cls) -> ThinkingConfig:
        return cls(enabled=False)

    @classmethod
    def on(cls, effort: ThinkingEffort | None = ThinkingEffort.MEDIUM) -> ThinkingConfig:
        return cls(enabled=True, effort=effort)


def _indices(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


@attrs.frozen
class PromptCache:
    """Where to place prompt-cache breakpoints, for providers that take them.

    ``system`` marks the system prompt, ``tools`` the last tool definition and
    ``messages`` the messages at these indices (negative indices count from the end).
    ``PromptCache.auto()`` marks the system prompt, the tools and the last message.
    """

    system: bool = False
    tools: bool = False
    messages: tuple[int, ...] = attrs.field(default=(), converter=_indices)

    @classmethod
    def auto(cls) -> PromptCache:
        return cls(system=True, tools=True, messages=(-1,))


@attrs.frozen
class OutputSchema:
    """The shape the answer must have: a JSON Schema object and a name for it.

    ``target`` is the attrs class or pydantic model the schema was derived from, if any:
    :attr:`cuca.Completion.parsed` is then an instance of it. ``strict`` asks providers
    that have the switch (OpenAI's ``strict: true``) to follow the schema exactly.
    Build one with :meth:`UnifiedRequest.set_output_schema`.
    """

    name: str
    schema: Mapping[str, Any] = attrs.field(hash=False)
    target: type | None = attrs.field(default=None, eq=False, hash=False)
    strict: bool = True

    @classmethod
    def of(
        cls, schema: Mapping[str, Any] | type, *, name: str | None = None, strict: bool = True
    ) -> OutputSchema:
        """An :class:`OutputSchema` from a JSON Schema object, an attrs class or a pydantic
        model (its schema derived by :func:`cuca._typeschema.json_schema_of`); a
        ``ConfigurationError`` for anything else."""
        if isinstance(schema, Mapping):
            return cls(name or "output", dict(schema), None, strict)
        if isinstance(schema, type):
            return cls(name or schema.__name__, json_schema_of(schema), schema, strict)
        raise ConfigurationError(
            f"an output schema is a JSON Schema dict, an attrs class or a pydantic model, "
            f"not {type(schema).__name__}"
        )


def _items(value: Iterable[Any], cls: type, what: str) -> tuple[Any, ...]:
    """``value`` as a tuple whose every item is a ``cls``."""
    try:
        items = tuple(value)
    except TypeError:
        raise ConfigurationError(f"{what} must be a sequence of {cls.__name__}") from None
    for item in items:
        if not isinstance(item, cls):
            raise ConfigurationError(f"{what} holds {cls.__name__} items, not {kind(item)}")
    return items


def _messages(value: Iterable[UnifiedMessage]) -> tuple[UnifiedMessage, ...]:
    return _items(value, UnifiedMessage, "UnifiedRequest.messages")


def _tools(value: Iterable[ToolDefinition]) -> tuple[ToolDefinition, ...]:
    return _items(value, ToolDefinition, "UnifiedRequest.tools")


class ToolChoiceMode(enum.Enum):
    """Whether the model may, must or must not call a tool."""

    AUTO = "auto"
    """It decides (what every backend does when no choice is sent)."""
    NONE = "none"
    """It answers in text and calls no tool, even with tools declared."""
    REQUIRED = "required"
    """It calls at least one of the declared tools."""
    TOOL = "tool"
    """It calls the one tool :attr:`ToolChoice.name`."""


def _tool_name(instance: ToolChoice, attribute: Any, value: str | None) -> None:
    if instance.mode is ToolChoiceMode.TOOL:
        if not isinstance(value, str) or not value:
            raise ConfigurationError(
                f"ToolChoice.name must name the tool to call, not {kind(value)}"
            )
    elif value is not None:
        raise ConfigurationError(
            f"ToolChoice.name is for mode TOOL only, not {instance.mode.value!r}"
        )


@attrs.frozen
class ToolChoice:
    """Whether the model may call tools: ``ToolChoice.AUTO``, ``NONE``, ``REQUIRED``, or
    ``ToolChoice.tool(name)`` for one named tool.

    :meth:`UnifiedRequest.set_tool_choice` also takes ``"auto"``, ``"none"`` and
    ``"required"``. Each adapter sends its wire's control (docs/unified.md lists them);
    a choice other than ``AUTO`` and ``NONE`` needs tools declared, and a named tool must
    be one of them.
    """

    mode: ToolChoiceMode = attrs.field(validator=of_type(ToolChoiceMode, what="a ToolChoiceMode"))
    name: str | None = attrs.field(default=None, validator=_tool_name)

    AUTO: ClassVar[ToolChoice]
    NONE: ClassVar[ToolChoice]
    REQUIRED: ClassVar[ToolChoice]

    @classmethod
    def tool(cls, name: str) -> ToolChoice:
        """The model must call the tool ``name`` (one of the request's tools)."""
        return cls(ToolChoiceMode.TOOL, name)

    def check(self, tools: Iterable[ToolDefinition]) -> None:
        """Refuse a choice the request's ``tools`` cannot meet (every adapter calls it
        before sending): ``REQUIRED`` or a named tool without tools, or a name that is
        not one of them."""
        names = [tool.name for tool in tools]
        if self.mode is ToolChoiceMode.REQUIRED and not names:
            raise ConfigurationError("tool_choice 'required' needs tools: add_tool(...) first")
        if self.mode is ToolChoiceMode.TOOL and self.name not in names:
            declared = ", ".join(repr(n) for n in names) or "none"
            raise ConfigurationError(
                f"tool_choice names the tool {self.name!r}, which the request does not "
                f"declare (its tools: {declared})"
            )

    def __str__(self) -> str:
        return f"tool:{self.name}" if self.mode is ToolChoiceMode.TOOL else self.mode.value


ToolChoice.AUTO = ToolChoice(ToolChoiceMode.AUTO)
ToolChoice.NONE = ToolChoice(ToolChoiceMode.NONE)
ToolChoice.REQUIRED = ToolChoice(ToolChoiceMode.REQUIRED)


def _tool_choice(value: ToolChoice | str | None) -> ToolChoice | None:
    """A :class:`ToolChoice` from itself or ``"auto"``, ``"none"``, ``"required"``."""
    if value is None or isinstance(value, ToolChoice):
        return value
    if isinstance(value, str) and value in ("auto", "none", "required"):
        return ToolChoice(ToolChoiceMode(value))
    raise ConfigurationError(
        "UnifiedRequest.tool_choice must be 'auto', 'none', 'required' or "
        f"ToolChoice.tool(name), not {kind(value)}"
    )


def _stop(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Stop sequences as a tuple of non-empty strings (one string is one sequence)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    elif isinstance(value, Mapping | bytes | bytearray | memoryview | set | frozenset):
        raise ConfigurationError(
            f"UnifiedRequest.stop must be a string or a list of strings, not {kind(value)}"
        )
    items = _items(value, str, "UnifiedRequest.stop")
    if any(not item for item in items):
        raise ConfigurationError("UnifiedRequest.stop holds an empty string, which stops nothing")
    return tuple(dict.fromkeys(items))


MAX_SEED = 2**31 - 1
"""The largest seed every backend takes (Gemini's is a 32-bit signed integer)."""


MAX_TEMPERATURE = 2.0
"""The highest temperature any vendor takes (OpenAI, Gemini, DeepSeek: 0 to 2;
Anthropic: 0 to 1, checked by its adapter)."""


@attrs.frozen
class CompactionStep:
    """What one compaction strategy did: ``removed`` says what went, in words
    (``"3 oldest turns (9 messages)"``); the token counts are the request's before and
    after this strategy ran."""

    strategy: str
    removed: str
    tokens_before: int
    tokens_after: int


@attrs.frozen
class CompactionReport:
    """What a compactor did to a request before it was sent: its tokens before and after
    (counted as ``client.count_tokens`` counts them), the budget, and each strategy that
    changed something, in order. ``exact`` is the counter's (false for an estimate)."""

    tokens_before: int
    tokens_after: int
    budget: int
    steps: tuple[CompactionStep, ...] = ()
    exact: bool = True


@attrs.frozen
class UnifiedRequest:
    """One turn's request, the same for every backend.

    Unset optional fields (``temperature``, ``max_tokens``, ``thinking``, ``stop``,
    ``seed``, ``top_p``, ``tool_choice``) are omitted from the wire rather than
    defaulted, except where a vendor requires them. ``provider`` is
    overwritten by the client before any hook runs, so it can never mis-route a request.
    """

    model: str = attrs.field(validator=of_type(str, what="a string"))
    provider: ProviderEndpoint = attrs.field(
        factory=lambda: ProviderEndpoint.custom(""),
        validator=of_type(ProviderEndpoint, what="a ProviderEndpoint"),
    )
    messages: tuple[UnifiedMessage, ...] = attrs.field(default=(), converter=_messages)
    temperature: float | None = attrs.field(
        default=None, validator=optional(real_in(0.0, MAX_TEMPERATURE))
    )
    max_tokens: int | None = attrs.field(default=None, validator=optional(positive_int))
    stream: bool = attrs.field(default=True, validator=of_type(bool, what="True or False"))
    thinking: ThinkingConfig | None = attrs.field(
        default=None, validator=optional(of_type(ThinkingConfig, what="a ThinkingConfig"))
    )
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), converter=_tools)
    prompt_cache: PromptCache | None = attrs.field(
        default=None, validator=optional(of_type(PromptCache, what="a PromptCache"))
    )
    output_schema: OutputSchema | None = attrs.field(
        default=None, validator=optional(of_type(OutputSchema, what="an OutputSchema"))
    )
    compaction: CompactionReport | None = None
    """What a compactor plugin did to this request (``cuca.Compactor``); never sent.
    The turn's response carries it on."""
    stop: tuple[str, ...] = attrs.field(default=(), converter=_stop)
    """Sequences that end the answer when the model writes one (not included in it)."""
    seed: int | None = attrs.field(default=None, validator=optional(int_in(0, MAX_SEED)))
    """A seed for the sampler's draws, where the backend takes one: the same request
    and seed then tend to give the same answer (no backend promises it)."""
    top_p: float | None = attrs.field(default=None, validator=optional(real_in(0.0, 1.0)))
    """Nucleus sampling: draw only from the most likely tokens whose probabilities add
    up to ``top_p``."""
    tool_choice: ToolChoice | None = attrs.field(default=None, converter=_tool_choice)
    """Whether the model may, must or must not call a tool (unset: the backend's
    default, which is ``AUTO`` everywhere)."""

    @classmethod
    def new(cls, model: str) -> UnifiedRequest:
        """An empty request for ``model``, with ``provider`` still unset (custom "")."""
        return cls(model=model)

    def add_message(self, message: UnifiedMessage) -> UnifiedRequest:
        return attrs.evolve(self, messages=(*self.messages, message))

    def add_system_message(self, content: str | Block | Iterable[Block]) -> UnifiedRequest:
        return self.add_message(UnifiedMessage(MessageRole.SYSTEM, _content(content)))

    def add_user_message(self, content: str | Block | Iterable[Block]) -> UnifiedRequest:
        return self.add_message(UnifiedMessage(MessageRole.USER, _content(content)))

    def add_assistant_message(self, content: str | Block | Iterable[Block]) -> UnifiedRequest:
        return self.add_message(UnifiedMessage(MessageRole.ASSISTANT, _content(content)))

    def add_tool_result(
        self,
        tool_call_id: str,
        output: str,
        *,
        is_error: bool = False,
        name: str | None = None,
    ) -> UnifiedRequest:
        """Append a Tool message answering the call ``tool_call_id`` (``name`` is the
        function's name, which Gemini matches results by)."""
        result = ToolResult(tool_call_id, output, is_error)
        msg = UnifiedMessage(MessageRole.TOOL, (result,), tool_call_id=tool_call_id, name=name)
        return self.add_message(msg)

    def set_max_tokens(self, max_tokens: int | None) -> UnifiedRequest:
        return attrs.evolve(self, max_tokens=max_tokens)

    def set_stream(self, stream: bool) -> UnifiedRequest:
        """Stream the answer (the default), or ask for one non-streamed response."""
        return attrs.evolve(self, stream=stream)

    def set_temperature(self, temperature: float | None) -> UnifiedRequest:
        return attrs.evolve(self, temperature=temperature)

    def set_thinking(
        self, thinking: ThinkingConfig | ThinkingEffort | bool | None
    ) -> UnifiedRequest:
        """Turn reasoning on (at an effort) or off; ``None`` leaves it to the provider."""
        if isinstance(thinking, bool):
            thinking = ThinkingConfig(enabled=thinking)
        elif isinstance(thinking, ThinkingEffort):
            thinking = ThinkingConfig(enabled=True, effort=thinking)
        return attrs.evolve(self, thinking=thinking)

    def add_tool(
        self,
        tool: ToolDefinition | str,
        description: str = "",
        input_schema: Mapping[str, Any] | None = None,
    ) -> UnifiedRequest:
        """Declare a tool, given as a :class:`ToolDefinition` or by name and schema."""
        if isinstance(tool, str):
            schema = input_schema if input_schema is not None else {"type": "object"}
            tool = ToolDefinition(tool, description, schema)
        return attrs.evolve(self, tools=(*self.tools, tool))

    def set_stop(self, stop: str | Iterable[str] | None) -> UnifiedRequest:
        """End the answer at any of these sequences (one string is one sequence;
        ``None`` or ``[]`` removes them)."""
        return attrs.evolve(self, stop=stop)

    def set_seed(self, seed: int | None) -> UnifiedRequest:
        """Seed the sampler (0 to 2**31 - 1), on the backends that take a seed."""
        return attrs.evolve(self, seed=seed)

    def set_top_p(self, top_p: float | None) -> UnifiedRequest:
        """Sample from the smallest set of tokens whose probabilities reach ``top_p``."""
        return attrs.evolve(self, top_p=top_p)

    def set_tool_choice(self, tool_choice: ToolChoice | str | None) -> UnifiedRequest:
        """``"auto"``, ``"none"``, ``"required"``, a :class:`ToolChoice`
        (``ToolChoice.tool("get_weather")`` for one named tool), or ``None`` to send none."""
        return attrs.evolve(self, tool_choice=tool_choice)

    def set_prompt_cache(self, prompt_cache: PromptCache | None) -> UnifiedRequest:
        return attrs.evolve(self, prompt_cache=prompt_cache)

    def set_output_schema(
        self,
        schema: Mapping[str, Any] | type | OutputSchema | None,
        *,
        name: str | None = None,
        strict: bool = True,
    ) -> UnifiedRequest:
        """Constrain the answer to a JSON Schema (see ``docs/structured-output.md``).

        ``schema`` is a JSON Schema object, an attrs class or a pydantic model (its
        schema is derived, and ``generate`` parses the answer into it), an
        :class:`OutputSchema`, or ``None`` to remove the constraint. ``name`` defaults to
        the class name, or ``"output"``.
        """
        if schema is None or isinstance(schema, OutputSchema):
            return attrs.evolve(self, output_schema=schema)
        built = OutputSchema.of(schema, name=name, strict=strict)
        return attrs.evolve(self, output_schema=built)

    def with_provider(self, provider: ProviderEndpoint) -> UnifiedRequest:
        return attrs.evolve(self, provider=provider)


# -- the end of a turn ---------------------------------------------------------------


class FinishReason(enum.StrEnum):
    """Why a turn's answer ended, the same on every backend.

    Each adapter maps its wire's own reason here and keeps that string beside it
    (``UnifiedResponse.provider_finish_reason``); docs/unified.md has the table. A str
    enum: ``FinishReason.STOP == "stop"``.
    """

    STOP = "stop"
    """The model finished its answer, or wrote one of the request's stop sequences."""
    LENGTH = "length"
    """Cut by ``max_tokens`` (while thinking too) or by the end of the context window."""
    TOOL_CALLS = "tool_calls"
    """The model called tools and waits for their results."""
    CONTENT_FILTER = "content_filter"
    """The provider's safety filter stopped or withheld the answer."""
    REFUSAL = "refusal"
    """The model declined to answer (Anthropic's ``refusal``)."""
    ERROR = "error"
    """The provider ended the answer on a fault of its own (a malformed tool call,
    resources exhausted) without an error status."""
    OTHER = "other"
    """A reason none of the above names (kept in ``provider_finish_reason``)."""


def _finish_reason(value: FinishReason | str | None) -> FinishReason | None:
    """A :class:`FinishReason` from itself or its value (``"stop"``)."""
    if value is None or isinstance(value, FinishReason):
        return value
    try:
        return FinishReason(value)
    except ValueError:
        names = ", ".join(reason.value for reason in FinishReason)
        raise ConfigurationError(
            f"a finish reason is one of {names}, not {kind(value)}: an adapter maps its "
            "wire's own string to one of them and keeps it as provider_finish_reason"
        ) from None


@attrs.frozen
class TokenUsage:
    """Token counts of one turn. ``reasoning_tokens`` is ``None`` when not reported."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens (reasoning is part of the completion), the
        ``total_tokens`` every vendor SDK reports."""
        return self.prompt_tokens + self.completion_tokens


@attrs.frozen
class PromptCacheUsage:
    """How much of the prompt came from a cache (``read``) and how much was stored
    (``write``)."""

    read_tokens: int = 0
    write_tokens: int = 0


@attrs.frozen
class TurnSummary:
    """What a decoder or the engine learned about a turn besides its blocks.

    ``counted_usage`` holds counts the adapter made itself where the server reports
    none (llama.cpp's ``/completion`` route: ``prompt_tokens`` 0, ``completion_tokens``
    one per Text block), while ``usage`` stays ``None``. ``finish_reason`` is the
    normalised reason, ``provider_finish_reason`` the wire's own string.
    """

    usage: TokenUsage | None = None
    prompt_cache_usage: PromptCacheUsage | None = None
    finish_reason: FinishReason | None = attrs.field(default=None, converter=_finish_reason)
    counted_usage: TokenUsage | None = None
    provider_finish_reason: str | None = None


@attrs.frozen
class UnifiedResponse:
    """The terminal record of a turn, filled once its stream has ended.

    ``endpoint`` is the base URL of the server that answered (the member of a pool
    that served the turn); ``None`` for the local engine and for a client left on its
    provider's default URL.

    ``cached`` is true when a :class:`~cuca.ResponseCache` answered the turn from a turn
    it kept: nothing was sent, ``usage`` is the kept turn's, and ``cost`` is 0.

    ``batch`` is true for an answer read from a vendor's batch job
    (:meth:`~cuca.CucaClient.batch`): ``cost`` is then at the vendor's batch rate.
    """

    provider: ProviderEndpoint
    model: str
    usage: TokenUsage | None = None
    prompt_cache_usage: PromptCacheUsage | None = None
    finish_reason: FinishReason | None = attrs.field(default=None, converter=_finish_reason)
    """Why the answer ended, the same on every backend (``None`` when the turn has no
    end: a turn cut short raises instead)."""
    counted_usage: TokenUsage | None = None
    """Counts the adapter made itself where the server reports no usage (llama.cpp's
    ``/completion`` route); ``None`` elsewhere. Not token counts: see the provider page."""
    endpoint: str | None = None
    cached: bool = False
    compaction: CompactionReport | None = None
    """What a compactor did to the request before it was sent (tokens before and after,
    what each strategy removed), or ``None`` when none ran or nothing was changed."""
    batch: bool = False
    provider_finish_reason: str | None = None
    """The backend's own word for ``finish_reason``, as its wire sent it (``"end_turn"``,
    ``"STOP"``, llama.cpp's ``stop_type``); the local engine's is its own: ``"stop"``
    (an end-of-generation token), ``"stop_sequence"``, ``"length"`` (``max_tokens``) or
    ``"context_length"`` (the context is full)."""

    @property
    def cost(self) -> Decimal | None:
        """What the turn cost in US dollars at today's prices (from genai-prices), or
        ``None`` when the provider, the model or the usage is unknown."""
        return self.cost_at(None)

    def cost_at(self, when: datetime | None) -> Decimal | None:
        """The cost at the prices in force at ``when`` (a timezone-aware datetime); 0 for
        a turn answered by the response cache."""
        if self.cached:
            from decimal import Decimal

            return Decimal(0)
        usage, cache = self.usage, self.prompt_cache_usage
        if usage is None:
            return None
        return price(
            self.provider.kind,
            self.model,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.reasoning_tokens,
            cache.read_tokens if cache else None,
            cache.write_tokens if cache else None,
            at=when,
            batch=self.batch,
        )


@attrs.frozen
class TokenCount:
    """What a request's prompt will cost in tokens, counted before it is sent.

    ``exact`` is true when the count comes from the model's own tokenizer over what
    the turn sends (the local engine, llama-server's ``/tokenize``, Anthropic's and
    Gemini's counting routes), false for an estimate (tiktoken for the OpenAI
    family). ``method`` names where the figure came from, such as
    ``"tiktoken o200k_base"`` or ``"anthropic count_tokens"``.
    """

    tokens: int
    exact: bool
    method: str = ""


@attrs.frozen
class ModelInfo:
    """How large a model's window is, and where that figure came from.

    ``context_window`` is the tokens one request may hold (prompt plus output) where
    the model is served: the loaded ``n_ctx`` for the local engine and llama-server,
    genai-prices' figure for a cloud model. ``max_output_tokens`` is the most one
    answer may hold, ``trained_context`` the window the model was trained with (a
    GGUF's ``context_length``); each is ``None`` where nothing says. ``source`` names
    the origin of the figures (``"genai-prices"``, ``"local engine"``,
    ``"llama-server /props"``).
    """

    model: str
    context_window: int | None = None
    max_output_tokens: int | None = None
    trained_context: int | None = None
    source: str = ""
