"""When Gemini says the prompt does not fit: a 400 "The input token count (R) exceeds
the maximum number of tokens allowed (L)."
"""

from __future__ import annotations

import re

from ..decoding import Overflow, error_object

__all__ = ["gemini_overflow"]


_GEMINI = re.compile(
    r"input token count \(?(\d+)\)? exceeds the maximum number of tokens allowed \(?(\d+)\)?"
)


def gemini_overflow(status: int, body: str) -> Overflow | None:
    """Gemini's 400 ``INVALID_ARGUMENT``: "The input token count (R) exceeds the maximum
    number of tokens allowed (L)."."""
    error = error_object(body)
    message = error.get("message") if error is not None else None
    if status != 400 or not isinstance(message, str):
        return None
    found = _GEMINI.search(message)
    if found is None:
        return None
    return Overflow(int(found.group(2)), int(found.group(1)))
