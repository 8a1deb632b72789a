"""A conversation cut into the pieces compaction may remove whole.

I/O-free. The rules every strategy keeps, whatever it removes:

- the first system message is never removed (``head``);
- the latest user message, and everything after it (the tool loop's current step), is
  never removed (``tail``);
- the rest is cut into *turns*, each a user message and what follows it up to the next
  one (what stands before the first user message is a turn of its own); a turn goes
  whole, so a tool call never loses its result, a result never loses its call, and a
  thinking block (signed or not) stays with the calls and text of its turn;
- turns that a tool call and its result span are merged into one; a turn whose call is
  answered in the tail joins the tail.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from cuca.types import MessageRole, ToolCall, ToolResult, UnifiedMessage

__all__ = ["Layout", "layout", "tool_pairs"]


@attrs.frozen
class Layout:
    """Message indices: ``head`` (the first system message, or ``None``), ``turns``
    (removable, oldest first, each a run of consecutive indices) and ``tail``."""

    head: int | None
    turns: tuple[tuple[int, ...], ...]
    tail: tuple[int, ...]

    def kept(self, turns: Sequence[tuple[int, ...]]) -> list[int]:
        """The indices of ``head``, the given ``turns`` and ``tail``, in order."""
        indices = [] if self.head is None else [self.head]
        indices += [i for turn in turns for i in turn]
        return sorted([*indices, *self.tail])


def _calls(message: UnifiedMessage) -> set[str]:
    return {b.id for b in message.content if isinstance(b, ToolCall)}


def _answers(message: UnifiedMessage) -> set[str]:
    ids = {b.tool_call_id for b in message.content if isinstance(b, ToolResult)}
    if message.role is MessageRole.TOOL and message.tool_call_id:
        ids.add(message.tool_call_id)
    return ids


def layout(messages: Sequence[UnifiedMessage]) -> Layout:
    """The pieces of ``messages`` (see the module's rules)."""
    head = next((i for i, m in enumerate(messages) if m.role is MessageRole.SYSTEM), None)
    users = [i for i, m in enumerate(messages) if m.role is MessageRole.USER]
    start = users[-1] if users else len(messages)
    if head is not None and head >= start:
        head = None  # a system message inside the tail stays there
    body = [i for i in range(start) if i != head]
    turns: list[list[int]] = []
    for i in body:
        if not turns or messages[i].role is MessageRole.USER:
            turns.append([i])
        else:
            turns[-1].append(i)
    tail = list(range(start, len(messages)))
    return _linked(messages, turns, tail, head)


def _linked(
    messages: Sequence[UnifiedMessage], turns: list[list[int]], tail: list[int], head: int | None
) -> Layout:
    """Merge the turns a call and its result span; a turn answered in the tail joins it."""
    where: dict[str, int] = {}  # call id -> the turn it was made in
    merged: list[list[int]] = []
    for turn in turns:
        merged.append(list(turn))
        for i in turn:
            for answered in _answers(messages[i]):
                first = where.get(answered)
                if first is not None and first < len(merged) - 1:
                    run = [j for t in merged[first:] for j in t]
                    del merged[first:]
                    merged.append(run)
                    where = {k: min(v, first) for k, v in where.items()}
            for call in _calls(messages[i]):
                where[call] = len(merged) - 1
    answered_late = {a for i in tail for a in _answers(messages[i])}
    cut = min((where[a] for a in answered_late if a in where), default=len(merged))
    joined = [j for t in merged[cut:] for j in t]
    return Layout(head, tuple(tuple(t) for t in merged[:cut]), tuple(sorted(joined + tail)))


def tool_pairs(messages: Sequence[UnifiedMessage]) -> list[tuple[int, int]]:
    """``(message index, block index)`` of every tool result, in order."""
    return [
        (i, j)
        for i, message in enumerate(messages)
        for j, block in enumerate(message.content)
        if isinstance(block, ToolResult)
    ]
