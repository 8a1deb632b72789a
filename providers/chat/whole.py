"""A whole ``chat.completion`` object (a non-streamed turn) as the events its stream
would have sent.
"""

from __future__ import annotations

from typing import Any

from ..decoding import json_dict, json_list
from ..whole_response import Events

__all__ = ["chat_events"]


def chat_events(completion: Any) -> Events:
    """A ``chat.completion`` object as one chunk: its message as the delta (tool calls
    indexed in order), its finish reason and usage, then ``[DONE]``."""
    choice = json_dict(json_list(json_dict(completion).get("choices"))[0])
    delta = dict(json_dict(choice.get("message")))
    calls = json_list(delta.get("tool_calls"))
    if calls:
        delta["tool_calls"] = [{**json_dict(c), "index": i} for i, c in enumerate(calls)]
    chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}]}
    if completion.get("usage"):
        chunk["usage"] = completion["usage"]
    return [("message", chunk), ("message", "[DONE]")]
