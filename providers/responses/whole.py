"""A whole ``response`` object (a non-streamed turn) as the events its stream would
have sent.
"""

from __future__ import annotations

from typing import Any

from ..decoding import json_dict, json_list
from ..whole_response import Events

__all__ = ["responses_events"]


def responses_events(response: Any) -> Events:
    """A ``response`` object as its output items' events and the terminal event."""
    events: Events = []
    for index, item in enumerate(json_list(json_dict(response).get("output"))):
        events += _output_item_events(index, json_dict(item))
    status = response.get("status")
    if status == "failed":
        return [*events, ("response.failed", {"type": "response.failed", "response": response})]
    kind = "response.incomplete" if status == "incomplete" else "response.completed"
    return [*events, (kind, {"type": kind, "response": response})]


def _output_item_events(index: int, item: dict[str, Any]) -> Events:
    kind, item_id = item.get("type"), item.get("id")
    deltas: list[tuple[str, str]] = []
    if kind == "message":
        parts = [json_dict(p) for p in json_list(item.get("content"))]
        deltas = [("response.output_text.delta", p["text"]) for p in parts if "text" in p]
    elif kind == "reasoning":
        summary = [json_dict(p).get("text") for p in json_list(item.get("summary"))]
        content = [json_dict(p).get("text") for p in json_list(item.get("content"))]
        deltas = [("response.reasoning_summary_text.delta", t) for t in summary if t]
        deltas += [("response.reasoning_text.delta", t) for t in content if t]
    where = {"item_id": item_id, "output_index": index}
    events: Events = [
        ("response.output_item.added", {"type": "response.output_item.added", "item": item})
    ]
    events += [(name, {"type": name, **where, "delta": text}) for name, text in deltas]
    done = {"type": "response.output_item.done", "output_index": index, "item": item}
    return [*events, ("response.output_item.done", done)]
