"""The three wires the server answers, each one row: how a body is read, how a turn
is written back streamed and whole, and how an error is answered. The wire knowledge
itself is in ``providers/<wire>/inbound.py`` and ``outbound.py``; this table only
says which functions a route calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from cuca.providers.anthropic import inbound as anthropic_in
from cuca.providers.anthropic import outbound as anthropic_out
from cuca.providers.chat import inbound as chat_in
from cuca.providers.chat import outbound as chat_out
from cuca.providers.responses import inbound as responses_in
from cuca.providers.responses import outbound as responses_out
from cuca.providers.serving import Ending, Inbound, Item, Signatures
from cuca.types import ProviderEndpoint

from .signing import ServerSignatures

__all__ = ["WIRES", "Wire", "Writer"]


class Writer(Protocol):
    """A wire's stream writer (``ChatStream``, ``MessageStream``, ``ResponseStream``)."""

    def open(self, input_tokens: int | None = None) -> bytes: ...

    def write(self, item: Item) -> bytes: ...

    def close(self, ending: Ending) -> bytes: ...

    def fail(self, error: BaseException) -> bytes: ...


@attrs.frozen
class Wire:
    """One wire the server answers.

    ``foreign`` is the issuer of a thinking signature that is not the server's seal
    (see :mod:`.signing`); ``announces_input`` says the stream opens with the prompt's
    token count (Anthropic's ``message_start``), which the server then counts first
    when the backend counts exactly."""

    name: str
    decode: Callable[[Any, Signatures], Inbound]
    writer: Callable[[str, Inbound, Signatures], Writer]
    whole: Callable[[Sequence[Item], Ending, str, Signatures], dict[str, Any]]
    error_body: Callable[[BaseException, int | None], tuple[int, dict[str, Any]]]
    foreign: ProviderEndpoint | None = None
    announces_input: bool = False

    def signatures(self, server: ServerSignatures) -> Signatures:
        return server.for_wire(self.foreign)


def _chat_decode(body: Any, signatures: Signatures) -> Inbound:
    return chat_in.decode(body)


def _chat_writer(model: str, inbound: Inbound, signatures: Signatures) -> Writer:
    return chat_out.ChatStream(model, include_usage=inbound.include_usage)


def _chat_whole(
    items: Sequence[Item], ending: Ending, model: str, signatures: Signatures
) -> dict[str, Any]:
    return chat_out.completion(items, ending, model)


def _anthropic_decode(body: Any, signatures: Signatures) -> Inbound:
    return anthropic_in.decode(body, signatures)


def _anthropic_writer(model: str, inbound: Inbound, signatures: Signatures) -> Writer:
    return anthropic_out.MessageStream(model, signatures=signatures)


def _anthropic_whole(
    items: Sequence[Item], ending: Ending, model: str, signatures: Signatures
) -> dict[str, Any]:
    return anthropic_out.message(items, ending, model, signatures=signatures)


def _responses_decode(body: Any, signatures: Signatures) -> Inbound:
    return responses_in.decode(body, signatures)


def _responses_writer(model: str, inbound: Inbound, signatures: Signatures) -> Writer:
    return responses_out.ResponseStream(model, signatures=signatures)


def _responses_whole(
    items: Sequence[Item], ending: Ending, model: str, signatures: Signatures
) -> dict[str, Any]:
    return responses_out.response(items, ending, model, signatures=signatures)


WIRES: dict[str, Wire] = {
    "chat": Wire("chat", _chat_decode, _chat_writer, _chat_whole, chat_out.error_body),
    "anthropic": Wire(
        "anthropic",
        _anthropic_decode,
        _anthropic_writer,
        _anthropic_whole,
        anthropic_out.error_body,
        foreign=ProviderEndpoint.ANTHROPIC,
        announces_input=True,
    ),
    "responses": Wire(
        "responses",
        _responses_decode,
        _responses_writer,
        _responses_whole,
        responses_out.error_body,
    ),
}
"""The wires by name."""
