"""The one JSON converter for cuca's types.

Blocks are adjacently tagged, ``{"type": "Text", "value": ...}``, so that every variant,
including the bare-string ``Text``, round-trips. A Text without provider data is
``{"type": "Text", "value": "hello"}``; one that carries a signature has an object
value. Endpoints are strings (``"openai"``, ``"custom:my-gateway"``), enums their values.

    >>> from cuca import Text, to_json, from_json, Block
    >>> to_json(Text("hi"))
    '{"type": "Text", "value": "hi"}'
    >>> from_json(to_json(Text("hi")), Block)
    Text(text='hi', signature=None, provider=None)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import cattrs

from ._checks import kind
from .errors import ConfigurationError, CucaError
from .types import (
    AnthropicThinkingParams,
    Block,
    GeminiThinkingParams,
    ImageBase64,
    OpenAiThinkingParams,
    OutputSchema,
    ProviderEndpoint,
    Text,
    Thinking,
    ThinkingParams,
    ToolCall,
    ToolResult,
)

__all__ = ["converter", "from_json", "structure", "to_json", "unstructure"]

T = TypeVar("T")

converter = cattrs.Converter(omit_if_default=False)
"""The cattrs converter every part of cuca uses for its types."""

_BLOCKS: dict[str, type[Any]] = {
    cls.__name__: cls for cls in (Text, ImageBase64, Thinking, ToolCall, ToolResult)
}
_PARAMS: dict[str, type[Any]] = {
    "Anthropic": AnthropicThinkingParams,
    "Gemini": GeminiThinkingParams,
    "OpenAi": OpenAiThinkingParams,
}


def _unstructure_endpoint(endpoint: ProviderEndpoint) -> str:
    return str(endpoint)


def _structure_endpoint(value: Any, _: Any) -> ProviderEndpoint:
    if not isinstance(value, str):
        raise ValueError(f"a provider endpoint is a string, not {value!r}")
    return ProviderEndpoint.parse(value)


def _unstructure_block(block: Block) -> dict[str, Any]:
    if isinstance(block, Text) and block.signature is None and block.provider is None:
        return {"type": "Text", "value": block.text}
    return {"type": type(block).__name__, "value": _plain.unstructure(block)}


def _structure_block(value: Any, _: Any) -> Block:
    if not isinstance(value, Mapping) or set(value) != {"type", "value"}:
        raise ValueError(f"a block is {{'type': ..., 'value': ...}}, not {value!r}")
    cls = _BLOCKS.get(value["type"])
    if cls is None:
        raise ValueError(f"unknown block type {value['type']!r}")
    if cls is Text and isinstance(value["value"], str):
        return Text(value["value"])
    return cast(Block, _plain.structure(value["value"], cls))


def _unstructure_params(params: ThinkingParams) -> dict[str, Any]:
    name = type(params).__name__.removesuffix("ThinkingParams")
    return {"type": name, "value": _plain.unstructure(params)}


def _structure_params(value: Any, _: Any) -> ThinkingParams:
    if not isinstance(value, Mapping) or value.get("type") not in _PARAMS:
        raise ValueError(f"unknown thinking params {value!r}")
    return cast(ThinkingParams, _plain.structure(value["value"], _PARAMS[value["type"]]))


def _structure_mapping(value: Any, _: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a JSON object, got {value!r}")
    return dict(value)


def _exact(cls: type, also: tuple[type, ...] = ()) -> Any:
    """A structure hook that takes a ``cls`` as it is and converts nothing: cattrs'
    default would turn ``"10"`` into 10, 3.7 into 3 and ``"false"`` into ``True``."""
    accepted = (cls, *also)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, accepted) or (isinstance(value, bool) and cls is not bool):
            raise ValueError(f"expected {cls.__name__}, got {kind(value)}")
        return value

    return hook


def _is_mapping(t: Any) -> bool:
    return getattr(t, "__origin__", None) is Mapping or t is Mapping


def _unstructure_output_schema(spec: OutputSchema) -> dict[str, Any]:
    """An output schema without its ``target`` class, which JSON cannot hold."""
    return {"name": spec.name, "schema": dict(spec.schema), "strict": spec.strict}


def _structure_output_schema(value: Any, _: Any) -> OutputSchema:
    return OutputSchema(value["name"], dict(value["schema"]), None, bool(value["strict"]))


def _configure(conv: cattrs.Converter) -> None:
    conv.register_unstructure_hook(ProviderEndpoint, _unstructure_endpoint)
    conv.register_structure_hook(ProviderEndpoint, _structure_endpoint)
    conv.register_structure_hook_func(_is_mapping, _structure_mapping)
    conv.register_unstructure_hook_func(_is_mapping, dict)
    conv.register_structure_hook(str, _exact(str))
    conv.register_structure_hook(int, _exact(int))
    conv.register_structure_hook(float, _exact(float, also=(int,)))
    conv.register_structure_hook(bool, _exact(bool))


# The block-level hooks need a converter that handles the classes' own fields.
_plain = cattrs.Converter()
_configure(_plain)
_configure(converter)
converter.register_unstructure_hook_func(lambda t: t in _BLOCKS.values(), _unstructure_block)
converter.register_unstructure_hook_func(lambda t: t == Block, _unstructure_block)
converter.register_structure_hook_func(lambda t: t == Block, _structure_block)
converter.register_unstructure_hook_func(lambda t: t == ThinkingParams, _unstructure_params)
converter.register_structure_hook_func(lambda t: t == ThinkingParams, _structure_params)
converter.register_structure_hook_func(
    lambda t: t == ThinkingParams | None,
    lambda v, _: None if v is None else _structure_params(v, ThinkingParams),
)
converter.register_unstructure_hook_func(lambda t: t in _PARAMS.values(), _unstructure_params)
converter.register_unstructure_hook(OutputSchema, _unstructure_output_schema)
converter.register_structure_hook(OutputSchema, _structure_output_schema)
for _cls in _BLOCKS.values():
    converter.register_structure_hook(_cls, _structure_block)


def unstructure(obj: Any) -> Any:
    """``obj`` as plain JSON-ready data (dicts, lists, strings, numbers)."""
    return converter.unstructure(obj)


def _reasons(exc: BaseException) -> list[str]:
    """The leaf errors of a (possibly grouped) cattrs failure, one line each."""
    if isinstance(exc, BaseExceptionGroup):
        return [line for inner in exc.exceptions for line in _reasons(inner)]
    if isinstance(exc, CucaError):
        return [exc.message]
    if isinstance(exc, KeyError):
        return [f"missing field {exc}"]
    return [str(exc)]


def structure(data: Any, cls: type[T] | Any) -> T:
    """Build a ``cls`` from plain data produced by :func:`unstructure`.

    Data of the wrong shape raises :class:`~cuca.errors.ConfigurationError` naming
    what was wrong.
    """
    try:
        return cast(T, converter.structure(data, cls))
    except Exception as exc:  # cattrs groups every field's error in an ExceptionGroup
        name = "Block" if cls == Block else getattr(cls, "__name__", str(cls))
        reasons = "; ".join(dict.fromkeys(_reasons(exc)))
        raise ConfigurationError(f"cannot read a {name} from {kind(data)}: {reasons}") from exc


def to_json(obj: Any) -> str:
    """``obj`` as a JSON string in cuca's converter format.

    A value JSON cannot hold (a ``set`` or ``bytes`` in tool arguments...) raises
    :class:`~cuca.errors.ConfigurationError`.
    """
    try:
        return json.dumps(unstructure(obj), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ConfigurationError(f"cannot write {type(obj).__name__} as JSON: {exc}") from None


def from_json(text: str | bytes, cls: type[T] | Any) -> T:
    """Read back a ``cls`` written by :func:`to_json`.

    Text that is not JSON, or JSON of the wrong shape, raises
    :class:`~cuca.errors.ConfigurationError`.
    """
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ConfigurationError(f"from_json was given text that is not JSON: {exc}") from None
    return cast(T, structure(data, cls))
