"""A whole ``GenerateContentResponse`` (a non-streamed turn) as the event its stream
would have sent.
"""

from __future__ import annotations

from typing import Any

from ..decoding import json_dict
from ..whole_response import Events

__all__ = ["gemini_events"]


def gemini_events(response: Any) -> Events:
    """A ``GenerateContentResponse``: the same shape as each streamed chunk."""
    return [("message", json_dict(response))]
