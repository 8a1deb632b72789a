"""A request as the openai SDK holds it, both ways: ``from_openai(body)`` reads the
keyword arguments of ``client.chat.completions.create(...)`` (the JSON body of
``/chat/completions``) into a :class:`~cuca.types.UnifiedRequest`, and
``to_openai(request)`` writes the body cuca's OpenAI adapter posts for it.

Both are the server's and the client's own translations (:mod:`.inbound` and
:mod:`.encode`), not a third one: the way in is the inbound reader of ``cuca serve``
made strict, so a field cuca has no place for is refused naming it instead of being
lost. They live here, above :mod:`cuca.types`, because the types know no vendor (the
import-linter floors): ``cuca.from_openai`` and ``cuca.to_openai`` re-export them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuca.types import ProviderEndpoint, UnifiedRequest

from .encode import dialect_of, encode_body
from .inbound import decode

__all__ = ["from_openai", "to_openai"]


def from_openai(body: Mapping[str, Any]) -> UnifiedRequest:
    """The request an OpenAI ``/chat/completions`` body stands for.

    ``body`` is what ``client.chat.completions.create(**body)`` takes: ``model``,
    ``messages`` (the SDK's ``ChatCompletionMessageParam`` dicts as they are) and the
    other keyword arguments. Raises :class:`~cuca.errors.ConfigurationError` naming
    the first field that is wrong, or that cuca has no place for (``n`` above 1,
    ``logit_bias``, a participant's ``name``...): nothing given is dropped silently.
    docs/unified.md lists what each field becomes.
    """
    return decode(dict(body) if isinstance(body, Mapping) else body, strict=True).request


def to_openai(request: UnifiedRequest) -> dict[str, Any]:
    """The ``/chat/completions`` body cuca's OpenAI adapter posts for ``request``
    (``client.chat.completions.create(**to_openai(request))`` sends the same).

    Raises :class:`~cuca.errors.ConfigurationError` where the adapter would (five stop
    sequences, a tool choice naming an undeclared tool...). What the chat wire has no
    place for is left out as when cuca sends it (docs/unified.md lists it).
    """
    return encode_body(dialect_of(ProviderEndpoint.OPENAI), request, request.model)
