"""Redaction of the outbound request: keys and e-mail addresses never leave the process.

:class:`RedactRequest` is a plugin whose ``on_request`` rewrites every text the request
carries (message text, tool results, unsigned reasoning, string values inside tool-call
arguments) before it is encoded, replacing what its patterns match with
``[REDACTED:<kind>]``. Streamed answers are redacted by a stage instead
(:func:`cuca.stages.redact_text`), because a secret can span two deltas.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from cuca.errors import ConfigurationError
from cuca.plugins import CucaPlugin
from cuca.types import Block, Text, Thinking, ToolCall, ToolResult, UnifiedMessage, UnifiedRequest

__all__ = ["REQUEST_PATTERNS", "RedactRequest"]

REQUEST_PATTERNS: Mapping[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "api_key": (
        r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic, DeepSeek
        r"|AIza[0-9A-Za-z_-]{35}"  # Google
        r"|AKIA[0-9A-Z]{16}"  # AWS access key id
        r"|gh[pousr]_[A-Za-z0-9]{36,}"  # GitHub
        r"|xox[abprs]-[A-Za-z0-9-]{10,})"  # Slack
    ),
    "bearer": r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*",
}
"""What :class:`RedactRequest` looks for by default: kind -> regular expression."""


class RedactRequest(CucaPlugin):
    """A plugin that redacts API keys, bearer tokens and e-mail addresses (or your own
    ``patterns``, and literal ``secrets``) from every request before it is sent.

    A Thinking block that carries a provider signature is left as it is: changing its
    text would make the provider refuse the signature.
    """

    name = "redact_request"

    def __init__(
        self,
        patterns: Mapping[str, str] = REQUEST_PATTERNS,
        *,
        secrets: Iterable[str] = (),
        replacement: str = "[REDACTED:{kind}]",
    ) -> None:
        kinds = {kind: pattern for kind, pattern in patterns.items()}
        for index, secret in enumerate(secrets):
            if not isinstance(secret, str) or not secret:
                raise ConfigurationError("secrets are non-empty strings")
            kinds[f"secret_{index}"] = re.escape(secret)
        try:
            self._patterns = [(k, re.compile(p)) for k, p in kinds.items()]
        except re.error as exc:
            message = f"a redaction pattern is not a regular expression: {exc}"
            raise ConfigurationError(message) from None
        self._replacement = replacement
        self.redacted = 0
        """How many matches were replaced, over every request this plugin saw."""

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        messages = tuple(self._message(m) for m in request.messages)
        if messages == request.messages:
            return request
        return attrs.evolve(request, messages=messages)

    def text(self, text: str) -> str:
        """``text`` with every match replaced."""
        for kind, pattern in self._patterns:
            text, count = pattern.subn(self._replacement.format(kind=kind), text)
            self.redacted += count
        return text

    def _message(self, message: UnifiedMessage) -> UnifiedMessage:
        content = tuple(self._block(b) for b in message.content)
        return message if content == message.content else attrs.evolve(message, content=content)

    def _block(self, block: Block) -> Block:
        if isinstance(block, Text) or (isinstance(block, Thinking) and block.signature is None):
            return attrs.evolve(block, text=self.text(block.text))
        if isinstance(block, ToolResult):
            return attrs.evolve(block, output=self.text(block.output))
        if isinstance(block, ToolCall):
            return attrs.evolve(block, arguments=self._value(dict(block.arguments)))
        return block

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self._value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._value(v) for v in value]
        return value
