"""The signatures ``cuca serve`` puts on thinking blocks, and reads back.

A client of the Messages wire (and of the Responses wire's ``encrypted_content``) hands
each thinking block back with its signature on the next turn. What the server sends is
a seal over the block's text, the backend that issued the reasoning, that backend's own
signature (Anthropic's, a Gemini thought signature, a Responses ``encrypted_content``;
none for the local engine) and its id for the block where it has one (a Responses
reasoning item's ``id``, which that backend needs back with its ``encrypted_content``)::

    cuca1.<issuer, backend signature and id, base64url JSON>.<HMAC-SHA256, base64url>

The MAC is keyed by the server's secret (random per process unless given, so that
replicas behind one address share it) and covers the text and the payload, so a client
cannot edit the reasoning, or move a signature to another block, without the server
noticing (400, as Anthropic refuses an invalid signature). Opened, a seal gives back the
backend's own signature and issuer: a backend that signs gets its bytes back intact,
through any wire that carries a signature.

A signature that is not a seal (a conversation begun on Anthropic itself, then pointed
at this server) is passed on as Anthropic's when it came on the Messages wire, and
dropped elsewhere: the backend it is meant for judges it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets

from cuca.errors import ConfigurationError
from cuca.types import ProviderEndpoint, Thinking

__all__ = ["PREFIX", "ServerSignatures"]

PREFIX = "cuca1."


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ServerSignatures:
    """Seals thinking blocks with an HMAC under ``secret`` (32 random bytes when not
    given) and opens the seals clients send back.

    ``foreign`` is the issuer given to a signature that is not a seal (``None``: such a
    signature is dropped and the block kept as plain text)."""

    def __init__(
        self, secret: bytes | None = None, *, foreign: ProviderEndpoint | None = None
    ) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.foreign = foreign

    def __repr__(self) -> str:
        return f"ServerSignatures(foreign={self.foreign!r})"

    def for_wire(self, foreign: ProviderEndpoint | None) -> ServerSignatures:
        """The same key, with ``foreign`` for signatures that are not seals."""
        twin = ServerSignatures(self._secret, foreign=foreign)
        return twin

    def _mac(self, text: str, payload: str) -> str:
        message = payload.encode() + b"\x00" + text.encode()
        return _b64(hmac.new(self._secret, message, hashlib.sha256).digest()[:24])

    def seal(
        self,
        text: str,
        signature: str | None,
        issuer: ProviderEndpoint | None,
        ident: str | None = None,
    ) -> str:
        """The seal a client is sent for a complete thinking block (``ident``: the
        backend's id of the block, kept only with a signature)."""
        issued = str(issuer) if issuer is not None and signature else ""
        fields = [issued, signature or ""]
        if signature and ident:
            fields.append(ident)
        payload = _b64(json.dumps(fields, separators=(",", ":")).encode())
        return f"{PREFIX}{payload}.{self._mac(text, payload)}"

    def open(self, text: str, signature: str, *, redacted: bool = False) -> Thinking:
        """The block a client's ``text`` and ``signature`` stand for: the backend's own
        signature, issuer and id for a seal of this server; a
        :class:`~cuca.errors.ConfigurationError` for a seal that does not match."""
        if not signature:
            return Thinking(text)
        if not signature.startswith(PREFIX):
            if self.foreign is None:
                return Thinking(text)
            return Thinking(text, signature=signature, provider=self.foreign, redacted=redacted)
        payload, _, mac = signature[len(PREFIX) :].partition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(text, payload).encode()):
            raise ConfigurationError("invalid signature in thinking block")
        try:
            issued, inner, *rest = json.loads(_unb64(payload))
            provider = ProviderEndpoint.parse(issued) if issued else None
            ident = str(rest[0]) if rest else None
        except (ValueError, TypeError, ConfigurationError):
            raise ConfigurationError("invalid signature in thinking block") from None
        if not inner:
            return Thinking(text)
        return Thinking(text, signature=inner, provider=provider, redacted=redacted, id=ident)
