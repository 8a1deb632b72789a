"""``cuca logs PATH [ID]``: list the turns of a session log, or show one (``--json`` too).

A tool loop logs one turn per step; a step that called tools shows its calls with their
results, read from the request of the later turn that sent them back to the model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cuca.errors import ConfigurationError
from cuca.observers.session_log import LoggedTurn, SessionLog
from cuca.stream import merge_blocks
from cuca.types import MessageRole, Text, Thinking, ToolCall, ToolResult

from .config import EXIT_USAGE, CliError
from .console import Console, one_line

__all__ = ["run_logs"]


def run_logs(args: argparse.Namespace, console: Console) -> int:
    if args.raw and not args.json:
        raise CliError("--raw needs --json (the response bytes go in the JSON record)")
    path = Path(args.path)
    if not path.is_file():
        raise CliError(f"no session log at {path}", EXIT_USAGE)
    try:
        log = SessionLog(path)
    except ConfigurationError as exc:
        raise CliError(str(exc).removeprefix("configuration error: "), EXIT_USAGE) from None
    with log:
        if args.id is not None:
            try:
                turns = [log.turn(args.id)]
            except ConfigurationError:
                raise CliError(f"no turn {args.id} in {path}", EXIT_USAGE) from None
            later = log.turns() if not args.json and _calls(turns[0]) else []
        else:
            turns = later = log.turns(limit=args.limit)
    results = tool_results(later)
    out = console.out
    for turn in turns:
        if args.json:
            record = turn.to_dict()
            if not args.raw:
                record.pop("raw")
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        elif args.id is not None:
            out.write(show(turn, results))
        else:
            out.write(summary_line(turn, results) + "\n")
    out.flush()
    return 0


def _tokens(turn: LoggedTurn) -> str:
    if turn.usage is None:
        return "-"
    return f"{turn.usage.prompt_tokens}/{turn.usage.completion_tokens}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def answer_text(turn: LoggedTurn) -> str:
    """The turn's answer: its Text deltas joined."""
    return "".join(b.text for b in turn.blocks if isinstance(b, Text))


def _calls(turn: LoggedTurn) -> list[ToolCall]:
    return [b for b in turn.blocks if isinstance(b, ToolCall)]


def tool_results(turns: list[LoggedTurn]) -> dict[str, ToolResult]:
    """Call id -> the result a tool loop sent back for it, from the tool messages of
    the logged requests (a step's results travel in the next step's request)."""
    results: dict[str, ToolResult] = {}
    for turn in turns:
        for message in turn.request.messages:
            if message.role is MessageRole.TOOL:
                for block in message.content:
                    if isinstance(block, ToolResult):
                        results.setdefault(block.tool_call_id, block)
    return results


def _call_text(call: ToolCall) -> str:
    return f"{call.name}({json.dumps(dict(call.arguments), ensure_ascii=False)})"


def _result_text(result: ToolResult) -> str:
    word = "tool error" if result.is_error else "tool result"
    return f"[{word} {result.tool_call_id}] {one_line(result.output)}"


def _steps_text(turn: LoggedTurn, results: dict[str, ToolResult]) -> str:
    """A step's calls and their results on one line: ``get_weather({"city": "Paris"})
    -> Paris: 18 C; ...`` (``-> ?`` for a call whose result was not logged)."""
    parts = []
    for call in _calls(turn):
        result = results.get(call.id)
        shown = "?" if result is None else one_line(result.output)
        if result is not None and result.is_error:
            shown = f"error: {shown}"
        parts.append(f"{_call_text(call)} -> {shown}")
    return "; ".join(parts)


def summary_line(turn: LoggedTurn, results: dict[str, ToolResult] | None = None) -> str:
    """``3  2026-11-30 12:00:39  ok  openai/gpt-4o  1117/46  $0.0019725  0.003s  0.004s
    I'm unable to…`` (id, start, status, provider/model, prompt/completion tokens, cost,
    time to first block, total time, the start of the answer; for a tool loop's step,
    its calls and their results)."""
    cost = "-" if turn.cost is None else f"${turn.cost:f}"
    text = one_line(answer_text(turn))
    if _calls(turn):
        text = " ".join(t for t in (text, _steps_text(turn, results or {})) if t)
    if turn.error is not None:
        text = f"{turn.error['kind']}: {turn.error['message']}"
    fields = [
        str(turn.id),
        turn.started_at.strftime("%Y-%m-%d %H:%M:%S"),
        turn.status,
        f"{turn.provider}/{turn.model}",
        _tokens(turn),
        cost,
        _seconds(turn.first_block_seconds),
        _seconds(turn.total_seconds),
        text[:60] + ("…" if len(text) > 60 else ""),
    ]
    return "  ".join(fields).rstrip()


def show(turn: LoggedTurn, results: dict[str, ToolResult] | None = None) -> str:
    """One turn in full: its summary, the request's messages, then the answer's blocks,
    each tool call followed by its result when a later turn sent it back."""
    results = results or {}
    lines = [summary_line(turn, results), ""]
    for message in turn.request.messages:
        lines.append(f"[{message.role.value}] {message.text()}")
    lines.append("")
    for block in merge_blocks(turn.blocks):
        if isinstance(block, Thinking):
            lines.append(f"[thinking] {block.text}")
        elif isinstance(block, ToolCall):
            lines.append(f"[tool call] {_call_text(block)}")
            if block.id in results:
                lines.append(_result_text(results[block.id]))
        elif isinstance(block, Text):
            lines.append(block.text)
    for error in turn.errors:
        lines.append(f"[error item] {error['kind']}: {error['message']}")
    if turn.error is not None:
        lines.append(f"[ended by] {turn.error['kind']}: {turn.error['message']}")
    return "\n".join(lines) + "\n"
