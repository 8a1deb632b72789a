"""What llama.cpp's own chat renderer gives a template beyond Hugging Face's variables.

cuca renders a GGUF's template as ``llama-server --jinja`` does (the differential test
``tests/test_template_llama_server.py`` compares both on the 70-template corpus). Two
things llama.cpp adds, and so does cuca:

* variables a few templates read: ``date_string`` (Llama 3.1/3.3 print
  ``Today Date: 26 Jul 2024`` without it), ``datetime`` and ``functions``
  (FireFunction v2, which fails without them);
* for a template that has no system role (Gemma 2 raises on one), the system text folded
  into the first user turn.

Pure functions over the template variables: :class:`~engine.template.ChatTemplate`
decides when they apply.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

__all__ = ["SYSTEM_PROBE", "extra_variables", "fold_system"]

SYSTEM_PROBE = "<cuca system role probe>"
"""The system text whose presence in a rendering shows that a template has a system role
(llama.cpp's own test: render ``[system, user]`` and look for the system text)."""


def extra_variables(
    reads: Callable[[str], bool], now: datetime, tools: list[Any] | None
) -> dict[str, Any]:
    """The variables llama.cpp passes that the template reads.

    ``date_string`` is today as ``30 Nov 2026``; ``datetime`` is ``Nov 30 2026``;
    ``functions`` is the declared tools as indented JSON, ``""`` without tools.
    """
    extras: dict[str, Any] = {}
    if reads("date_string"):
        extras["date_string"] = now.strftime("%d %b %Y")
    if reads("datetime"):
        extras["datetime"] = now.strftime("%b %d %Y")
    if reads("functions"):
        extras["functions"] = json.dumps(tools, indent=2, ensure_ascii=False) if tools else ""
    return extras


def fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every system message folded into the user turn that follows it.

    The system texts (joined with newlines) open that user message's content, followed
    by a newline and the user's own text. System text with no user message after it,
    or before an assistant or tool turn, becomes a user message of its own.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        if message["role"] == "system":
            pending.append(str(message["content"]))
            continue
        if pending and message["role"] == "user":
            content = str(message["content"])
            message = {**message, "content": "\n".join([*pending, content] if content else pending)}
        elif pending:
            out.append({"role": "user", "content": "\n".join(pending)})
        pending = []
        out.append(message)
    if pending:
        out.append({"role": "user", "content": "\n".join(pending)})
    return out
