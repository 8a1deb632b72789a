"""What every stream decoder reads the same way, written once.

Vendor JSON is untrusted: a count may arrive as ``true`` or ``"12"``, tool-call
arguments as any text, an error body as anything. Each helper has one behaviour for
every adapter, so that the same bytes mean the same thing whoever decodes them.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_body", "read_int", "tool_arguments"]


def read_int(value: Any) -> int | None:
    """``value`` if it is an integer, else ``None``: a JSON ``true`` is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def tool_arguments(raw: str) -> dict[str, Any] | None:
    """The arguments of a tool call from their streamed JSON text: a JSON object, ``{}``
    for empty text, ``None`` for anything else (not JSON, not an object, absurdly deep)."""
    text = raw.strip()
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: hostile nesting depth
        return None
    return parsed if isinstance(parsed, dict) else None


def json_body(body: str) -> Any:
    """A non-2xx body as JSON (a one-element list unwrapped, as Gemini sends it), or
    ``None`` when it is not JSON."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, list) and len(data) == 1:
        return data[0]
    return data
