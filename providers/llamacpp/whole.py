"""A whole ``/completion`` result (a non-streamed turn) as the frames its stream would
have sent.
"""

from __future__ import annotations

from typing import Any

from ..decoding import json_dict
from ..whole_response import Events

__all__ = ["completion_events"]


def completion_events(result: Any) -> Events:
    """A ``/completion`` result: its text as one partial frame, then the final frame."""
    result = json_dict(result)
    partial = {"content": result.get("content", ""), "stop": False}
    return [("message", partial), ("message", {**result, "content": "", "stop": True})]
