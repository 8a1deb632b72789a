"""A request as the anthropic SDK holds it, both ways: ``from_anthropic(body)`` reads
the keyword arguments of ``client.messages.create(...)`` (the JSON body of
``/v1/messages``) into a :class:`~cuca.types.UnifiedRequest`, and
``to_anthropic(request)`` writes the body cuca's Anthropic adapter posts for it.

Both are the server's and the client's own translations (:mod:`.inbound` and
:mod:`.encode`), not a third one: the way in is the inbound reader of ``cuca serve``
made strict, so a field cuca has no place for is refused naming it instead of being
lost. They live here, above :mod:`cuca.types`, because the types know no vendor (the
import-linter floors): ``cuca.from_anthropic`` and ``cuca.to_anthropic`` re-export
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuca.types import UnifiedRequest

from .encode import ANTHROPIC, AnthropicConfig, encode_body
from .inbound import decode

__all__ = ["from_anthropic", "to_anthropic"]


def from_anthropic(body: Mapping[str, Any]) -> UnifiedRequest:
    """The request an Anthropic Messages body stands for.

    ``body`` is what ``client.messages.create(**body)`` takes: ``model``,
    ``max_tokens``, ``messages`` (the SDK's ``MessageParam`` dicts as they are),
    ``system`` and the other keyword arguments. Thinking blocks keep their signatures,
    issued by Anthropic (replayed to Anthropic only). Raises
    :class:`~cuca.errors.ConfigurationError` naming the first field that is wrong, or
    that cuca has no place for (``top_k``, ``metadata``, a citation...): nothing given
    is dropped silently. docs/unified.md lists what each field becomes.
    """
    return decode(dict(body) if isinstance(body, Mapping) else body, strict=True).request


def to_anthropic(request: UnifiedRequest, config: AnthropicConfig | None = None) -> dict[str, Any]:
    """The Messages body cuca's Anthropic adapter posts for ``request``, with the
    client's ``config`` (its ``adaptive_thinking`` decides how an effort is sent):
    ``client.messages.create(**to_anthropic(request))`` sends the same.

    Raises :class:`~cuca.errors.ConfigurationError` where the adapter would (a
    temperature above 1, a forced tool with thinking on...). What the Messages wire
    has no place for is left out as when cuca sends it (docs/unified.md lists it).
    """
    adaptive = config.adaptive_thinking if config is not None else False
    return encode_body(ANTHROPIC, request, adaptive=adaptive)
