"""``cuca logs PATH [ID]``: list the turns of a session log, or show one (``--json`` too)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cuca.errors import ConfigurationError
from cuca.observers.session_log import LoggedTurn, SessionLog
from cuca.stream import merge_blocks
from cuca.types import Text, Thinking, ToolCall

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
        else:
            turns = log.turns(limit=args.limit)
    out = console.out
    for turn in turns:
        if args.json:
            record = turn.to_dict()
            if not args.raw:
                record.pop("raw")
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        elif args.id is not None:
            out.write(show(turn))
        else:
            out.write(summary_line(turn) + "\n")
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


def summary_line(turn: LoggedTurn) -> str:
    """``3  2026-11-30 12:00:39  ok  openai/gpt-4o  1117/46  $0.0019725  0.003s  0.004s
    I'm unable to…`` (id, start, status, provider/model, prompt/completion tokens, cost,
    time to first block, total time, the start of the answer)."""
    cost = "-" if turn.cost is None else f"${turn.cost:f}"
    text = one_line(answer_text(turn))
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


def show(turn: LoggedTurn) -> str:
    """One turn in full: its summary, the request's messages, then the answer's blocks."""
    lines = [summary_line(turn), ""]
    for message in turn.request.messages:
        lines.append(f"[{message.role.value}] {message.text()}")
    lines.append("")
    for block in merge_blocks(turn.blocks):
        if isinstance(block, Thinking):
            lines.append(f"[thinking] {block.text}")
        elif isinstance(block, ToolCall):
            arguments = json.dumps(dict(block.arguments), ensure_ascii=False)
            lines.append(f"[tool call] {block.name}({arguments})")
        elif isinstance(block, Text):
            lines.append(block.text)
    for error in turn.errors:
        lines.append(f"[error item] {error['kind']}: {error['message']}")
    if turn.error is not None:
        lines.append(f"[ended by] {turn.error['kind']}: {turn.error['message']}")
    return "\n".join(lines) + "\n"
