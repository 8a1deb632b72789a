"""A whole ``message`` object (a non-streamed turn) as the events its stream would
have sent.
"""

from __future__ import annotations

import json
from typing import Any

from ..decoding import json_dict, json_list
from ..whole_response import Events

__all__ = ["anthropic_events"]


def anthropic_events(message: Any) -> Events:
    """A ``message`` object as ``message_start``, one start/delta/stop run per content
    block, ``message_delta`` (stop reason, usage) and ``message_stop``."""
    blocks = json_list(json_dict(message).get("content"))
    start = {**message, "content": []}
    events: Events = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(blocks):
        events += _block_events(index, json_dict(block))
    usage = json_dict(message.get("usage"))
    delta = {"stop_reason": message.get("stop_reason")}
    tail = {"type": "message_delta", "delta": delta, "usage": usage}
    return [*events, ("message_delta", tail), ("message_stop", {"type": "message_stop"})]


def _block_events(index: int, block: dict[str, Any]) -> Events:
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    opened = dict(block)
    if kind == "text":
        opened["text"] = ""
        deltas = [{"type": "text_delta", "text": block.get("text", "")}]
    elif kind == "thinking":
        opened["thinking"], opened["signature"] = "", ""
        deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")}]
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        opened["input"] = {}
        partial = json.dumps(block.get("input", {}), ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": partial}]
    start = {"type": "content_block_start", "index": index, "content_block": opened}
    events: Events = [("content_block_start", start)]
    for delta in deltas:
        payload = {"type": "content_block_delta", "index": index, "delta": delta}
        events.append(("content_block_delta", payload))
    stop = {"type": "content_block_stop", "index": index}
    return [*events, ("content_block_stop", stop)]
