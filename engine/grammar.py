"""Constrained decoding for structured output: a llama.cpp grammar (GBNF) built from the
request's JSON Schema with llama-cpp-python's converter.

The grammar sampler goes first in the turn's sampler chain (see
:meth:`~cuca.engine.backend.LlamaBackend.sampler`): every candidate token that would
leave the schema is masked before top-k, top-p and the draw, so even a very small model
can only produce JSON that parses and validates. Compiled grammars are cached by
schema, as a conversation sends the same schema on every turn.
"""

from __future__ import annotations

import functools
import json

from cuca.errors import ConfigurationError
from cuca.types import OutputSchema

__all__ = ["gbnf_for"]


def gbnf_for(spec: OutputSchema | None) -> str | None:
    """The GBNF grammar of ``spec``'s schema (``None`` without a schema); a schema the
    converter cannot compile is a ``ConfigurationError``."""
    if spec is None:
        return None
    return _compile(json.dumps(dict(spec.schema), sort_keys=True))


@functools.lru_cache(maxsize=32)
def _compile(schema: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        grammar: str = json_schema_to_gbnf(schema)
    except Exception as exc:  # the converter raises bare ValueError/KeyError/...
        message = f"the local engine cannot build a grammar from this schema: {exc!r}"
        raise ConfigurationError(message) from None
    return grammar
