"""When Anthropic (or DeepSeek's bridge) says the prompt does not fit: "prompt is too
long: R tokens > L maximum", or "input length and `max_tokens` exceed context limit:
P + M > L".
"""

from __future__ import annotations

import re

from ..decoding import Overflow, error_object

__all__ = ["anthropic_overflow"]


_TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
_EXCEEDS = re.compile(r"exceed context limit: (\d+) \+ (\d+) > (\d+)")


def anthropic_overflow(status: int, body: str) -> Overflow | None:
    """Anthropic (and the DeepSeek bridge): ``prompt is too long: R tokens > L maximum``,
    or ``input length and `max_tokens` exceed context limit: P + M > L``."""
    error = error_object(body)
    message = error.get("message") if error is not None else None
    if not isinstance(message, str):
        return None
    if (found := _TOO_LONG.search(message)) is not None:
        return Overflow(int(found.group(2)), int(found.group(1)))
    if (found := _EXCEEDS.search(message)) is not None:
        prompt, output, limit = (int(g) for g in found.groups())
        return Overflow(limit, prompt + output)
    if "prompt is too long" in message or "exceed context limit" in message:
        return Overflow()
    return None
