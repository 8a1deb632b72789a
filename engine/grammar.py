"""Constrained decoding: a llama.cpp grammar (GBNF) built with llama-cpp-python's
converter from the request's JSON Schema (structured output), or from its tools' schemas
when the request forces a tool call (``tool_choice`` ``REQUIRED`` or one named tool).

A forced call is the model's own tool syntax around one call object whose ``name`` is a
tool allowed and whose arguments follow that tool's schema (:func:`tool_gbnf`): Hermes'
``<tool_call>`` tags, Llama 3's bare ``{"name": ..., "parameters": ...}``, Mistral's
``[TOOL_CALLS][...]``. Once the call is written the grammar admits only the end of the
turn, so the answer is that one call.

The grammar sampler goes first in the turn's sampler chain (see
:meth:`~cuca.engine.backend.LlamaBackend.sampler`): every candidate token that would
leave the schema is masked before top-k, top-p and the draw, so even a very small model
can only produce JSON that parses and validates. Compiled grammars are cached by
schema, as a conversation sends the same schema on every turn.

llama-cpp-python's converter ignores number bounds; :class:`_Converter` adds them for
integral bounds whose range holds at most :data:`MAX_ENUMERATED` integers, by listing
the integers (an integer) or the integer parts with an optional fraction (a number).
Other bounds are left to validation (``Completion.parsed``). Its string characters also
admit raw control characters, which JSON forbids: the compiled grammar excludes them.

:class:`GrammarSampler` samples as llama.cpp's own common sampler does: draw from the
ordinary chain first and keep the token if the grammar accepts it (one check), and only
when it does not, mask the whole vocabulary with the grammar and draw again. Most
tokens of a JSON answer pass the check, so the grammar rarely touches every candidate.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
from types import ModuleType
from typing import Any

from cuca.errors import ConfigurationError
from cuca.types import OutputSchema, ToolChoice, ToolChoiceMode, ToolDefinition

from .formats import ToolSyntax

__all__ = ["MAX_ENUMERATED", "GrammarSampler", "bounded_number_rule", "gbnf_for", "tool_gbnf"]

MAX_ENUMERATED = 2000
"""The widest integer range a grammar lists value by value."""

# at most 15 decimals (a double's precision): a model that keeps writing digits (Gemma 3
# 270M wrote "1.000..." until max_tokens) must close the number
_FRACTION = '("." [0-9]{1,15})?'
# the converter's string character, and the one JSON allows (no raw control characters)
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'
_ZEROS = '("." "0"{1,15})?'


def gbnf_for(spec: OutputSchema | None) -> str | None:
    """The GBNF grammar of ``spec``'s schema (``None`` without a schema); a schema the
    converter cannot compile is a ``ConfigurationError``."""
    if spec is None:
        return None
    return _compile(json.dumps(dict(spec.schema), sort_keys=True))


_FORCED_CALL: dict[ToolSyntax, tuple[str, str]] = {
    ToolSyntax.HERMES: ("arguments", 'root ::= "<tool_call>\\n" call "\\n"? "</tool_call>"'),
    ToolSyntax.LLAMA3_JSON: ("parameters", "root ::= call"),
    ToolSyntax.MISTRAL: ("arguments", 'root ::= "[TOOL_CALLS][" call "]"'),
}
"""Per tool syntax: the key of a call's arguments, and the grammar's root around the
call object (the rule ``call``)."""


def tool_gbnf(
    syntax: ToolSyntax | None, tools: tuple[ToolDefinition, ...], choice: ToolChoice | None
) -> str | None:
    """The grammar that makes the model call a tool ``choice`` allows, in its ``syntax``;
    ``None`` when ``choice`` forces no call. A syntax no grammar is written for (gpt-oss'
    harmony channels) is a ``ConfigurationError``."""
    if choice is None or choice.mode in (ToolChoiceMode.AUTO, ToolChoiceMode.NONE):
        return None
    choice.check(tools)
    if syntax not in _FORCED_CALL:
        raise ConfigurationError(
            f"the local engine cannot force a tool call in this model's tool syntax "
            f"({syntax.value if syntax else 'none'}): leave tool_choice unset or 'auto'"
        )
    key, root = _FORCED_CALL[syntax]
    allowed = [t for t in tools if choice.mode is ToolChoiceMode.REQUIRED or t.name == choice.name]
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, key: dict(t.input_schema)},
            "required": ["name", key],
            "additionalProperties": False,
        }
        for t in allowed
    ]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    body = _compile(json.dumps(schema, sort_keys=True), "call", ("name", key))
    return f"{root}\n{body}"


@functools.lru_cache(maxsize=32)
def _compile(schema_text: str, rule: str = "", first: tuple[str, ...] = ()) -> str:
    """The GBNF of a schema, its top rule named ``rule`` (``root`` when empty), the
    properties named in ``first`` written first, in that order."""
    try:
        converter = _converter_class()(
            prop_order={name: i for i, name in enumerate(first)},
            allow_fetch=False,
            dotall=False,
            raw_pattern=False,
        )
        schema = converter.resolve_refs(json.loads(schema_text), "stdin")
        converter.visit(schema, rule)
        grammar: str = converter.format_grammar().replace(_LOOSE_CHAR, _JSON_CHAR)
    except Exception as exc:  # the converter raises bare AssertionError/KeyError/...
        message = f"the local engine cannot build a grammar from this schema: {exc!r}"
        raise ConfigurationError(message) from None
    return grammar


def bounded_number_rule(schema: dict[str, Any]) -> str | None:
    """A GBNF expression for an ``integer`` or ``number`` schema's bounds, or ``None``
    when there are none, they are not integral, or the range is too wide to list."""
    lo, hi = _bounds(schema)
    if lo is None or hi is None or hi < lo or hi - lo > MAX_ENUMERATED:
        return None
    if schema.get("type") == "integer":
        return " | ".join(f'"{k}"' for k in range(lo, hi + 1))
    alternatives = [f'"{k}" {_FRACTION}' for k in range(max(lo, 0), hi)]  # [k, k + 1)
    # "-m.f" is in (-(m + 1), -m]: inside when -(m + 1) >= lo and -m <= hi
    alternatives += [f'"-{m}" {_FRACTION}' for m in range(max(-hi, 1), -lo)]
    if lo <= -1 and hi >= 0:
        alternatives.append(f'"-0" {_FRACTION}')
    alternatives += [f'"{k}" {_ZEROS}' for k in sorted({lo, hi})]  # the bounds themselves
    return " | ".join(alternatives)


def _bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    if schema.get("exclusiveMinimum") is not None or schema.get("exclusiveMaximum") is not None:
        return None, None  # rare, and exactness at an open bound is subtle: validation
    lo, hi = _integral(schema.get("minimum")), _integral(schema.get("maximum"))
    return (lo, hi) if lo is not None and hi is not None else (None, None)


def _integral(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


@functools.cache
def _converter_class() -> type:
    from llama_cpp.llama_grammar import SchemaConverter

    class _Converter(SchemaConverter):
        """llama-cpp-python's converter, plus integral number bounds."""

        def visit(self, schema: Any, name: str) -> Any:
            if isinstance(schema, dict) and schema.get("type") in ("integer", "number"):
                rule = bounded_number_rule(schema)
                if rule is not None:
                    rule_name = name or "root"
                    return self._add_rule(rule_name, f"({rule}) space")  # type: ignore[no-untyped-call]
            return super().visit(schema, name)  # type: ignore[no-untyped-call]

    return _Converter


class GrammarSampler:
    """A grammar that constrains what a sampler chain draws (one generation).

    ``sample(chain)`` draws with the chain, checks the token against the grammar, and
    redraws from the grammar-masked logits only when the check fails; the grammar then
    accepts the token, advancing its state.
    """

    def __init__(self, ll: ModuleType, ctx: Any, vocab: Any, gbnf: str) -> None:
        self._ll, self._ctx = ll, ctx
        self._grammar = ll.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        if not self._grammar:
            raise ConfigurationError("llama.cpp rejected the grammar built from the schema")
        self._n_vocab = int(ll.llama_vocab_n_tokens(vocab))
        self._one = ll.llama_token_data(0, 0.0, 0.0)
        self._check = ll.llama_token_data_array(ctypes.pointer(self._one), 1, -1, False)
        self._full: Any = None  # the vocabulary's token data, built on the first redraw

    def sample(self, chain: Any, row: int = -1) -> int:
        """The token for the logits of batch row ``row`` (the last one by default)."""
        ll = self._ll
        token = int(ll.llama_sampler_sample(chain, self._ctx, row))
        if self._rejects(token):
            token = self._redraw(chain, row)
        ll.llama_sampler_accept(self._grammar, token)
        return token

    def _rejects(self, token: int) -> bool:
        self._one.id, self._one.logit, self._one.p = token, 0.0, 0.0
        self._check.size, self._check.selected, self._check.sorted = 1, -1, False
        self._ll.llama_sampler_apply(self._grammar, ctypes.byref(self._check))
        return math.isinf(self._one.logit)

    def _redraw(self, chain: Any, row: int) -> int:
        import numpy as np

        ll, n = self._ll, self._n_vocab
        if self._full is None:
            dtype = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
            self._full = np.zeros(n, dtype=dtype)
        full = self._full
        full["id"] = np.arange(n, dtype=np.int32)
        full["logit"] = np.ctypeslib.as_array(ll.llama_get_logits_ith(self._ctx, row), shape=(n,))
        full["p"] = 0.0
        data = full.ctypes.data_as(ctypes.POINTER(ll.llama_token_data))
        candidates = ll.llama_token_data_array(data, n, -1, False)
        ll.llama_sampler_apply(self._grammar, ctypes.byref(candidates))
        ll.llama_sampler_apply(chain, ctypes.byref(candidates))
        return int(candidates.data[candidates.selected].id)

    def close(self) -> None:
        if self._grammar is not None:
            self._ll.llama_sampler_free(self._grammar)
            self._grammar = None
