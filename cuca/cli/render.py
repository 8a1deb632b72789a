"""Showing a stream to a person: answer text, thinking apart, tool calls, a usage line.

On a terminal, thinking is dim; elsewhere it sits under a ``--- thinking ---`` heading
and the answer that follows under ``--- answer ---``, so a pipe still tells them apart.
An answer with no thinking is written bare. Non-fatal errors and the usage line go to
stderr, so stdout holds the model's output only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Protocol

from cuca.errors import CucaError
from cuca.types import Block, ImageBase64, Text, Thinking, ToolCall, ToolResult, UnifiedResponse

from .console import Console

__all__ = ["Renderer", "TextRenderer", "TurnClock", "usage_line"]

DIM = "\x1b[2m"
RESET = "\x1b[0m"
THINKING_HEADING = "--- thinking ---"
ANSWER_HEADING = "--- answer ---"


class Renderer(Protocol):
    """What a command calls while a turn streams (text or JSON output)."""

    def begin(self) -> None:
        """A turn starts: reset per-turn state and the clock."""

    def arrived(self) -> None:
        """A batch of items arrived (what one network read or one engine step produced);
        its items follow, each through :meth:`item`."""

    def item(self, item: Block | CucaError) -> None:
        """One stream item: a block, or an error that did not end the turn."""

    def end(self, response: UnifiedResponse | None) -> None:
        """The stream ended cleanly with ``response``."""

    def failed(self, error: CucaError) -> None:
        """The turn (or its set-up) ended with ``error``."""

    def interrupted(self) -> None:
        """Ctrl-C stopped the turn."""


MIN_RATE_SPAN = 0.05
"""Seconds between the first item and the end below which no rate is shown, even when
the items came in more than one batch: two reads a millisecond apart measure the
network, not the model."""


class TurnClock:
    """When a turn's first batch of items arrived, and how many batches came, for
    tokens per second."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.first: float | None = None
        self.arrivals = 0

    def arrived(self) -> None:
        """A batch of items arrived."""
        if self.first is None:
            self.first = self.clock()
        self.arrivals += 1

    def rate(self, completion_tokens: int) -> float | None:
        """Output tokens per second while generating: the tokens after the first item,
        over the time from the first batch to the end (prompt processing and network
        set-up are not counted). ``None`` when that cannot be measured: fewer than two
        tokens; a turn whose items all came in one batch (a fast server's answer in one
        read, a short cached answer), decided by how it arrived and not by the time it
        took, so a busy machine does not invent a rate; or under
        :data:`MIN_RATE_SPAN` seconds."""
        if self.first is None or completion_tokens < 2 or self.arrivals < 2:
            return None
        span = self.clock() - self.first
        if span < MIN_RATE_SPAN:
            return None
        return (completion_tokens - 1) / span


def usage_line(response: UnifiedResponse | None, rate: float | None) -> str:
    """``usage: prompt 42 (cache read 30, write 12) · completion 17 · reasoning 0 ·
    $0.000093 · 38.5 tok/s · stop``. The cache part is left out when the provider reports
    no cache usage, ``reasoning n/a`` means the count was not reported, the cost is shown
    when the model's prices are known."""
    parts: list[str] = []
    usage = response.usage if response else None
    cache = response.prompt_cache_usage if response else None
    if usage is not None:
        prompt = f"prompt {usage.prompt_tokens}"
        if cache is not None:
            prompt += f" (cache read {cache.read_tokens}, write {cache.write_tokens})"
        parts.append(prompt)
        parts.append(f"completion {usage.completion_tokens}")
        reasoning = usage.reasoning_tokens
        parts.append(f"reasoning {'n/a' if reasoning is None else reasoning}")
        cost = response.cost if response else None
        if cost is not None:
            parts.append(f"${cost:f}")
    else:
        parts.append("not reported")
    if rate is not None:
        parts.append(f"{rate:.1f} tok/s")
    if response is not None and response.finish_reason:
        parts.append(response.finish_reason)
    return "usage: " + " · ".join(parts)


def tool_call_line(call: ToolCall) -> str:
    """``[tool call] name({"a": 1})``."""
    arguments = json.dumps(dict(call.arguments), ensure_ascii=False)
    return f"[tool call] {call.name}({arguments})"


def tool_result_line(result: ToolResult) -> str:
    """``[tool result call_1] 18 C`` (``[tool error ...]`` for an error), on one line:
    the output's line breaks are shown as ``\\n``."""
    kind = "tool error" if result.is_error else "tool result"
    output = result.output.replace("\r", "").replace("\n", "\\n")
    return f"[{kind} {result.tool_call_id}] {output}"


class TextRenderer:
    """Writes a turn for people: the answer streamed to stdout, the rest on stderr."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.clock = TurnClock()
        self._section: str | None = None  # "thinking", "answer" or None
        self._line_open = False  # something is written on stdout's current line

    def begin(self) -> None:
        self.clock = TurnClock()
        self._section, self._line_open = None, False

    def arrived(self) -> None:
        self.clock.arrived()

    def item(self, item: Block | CucaError) -> None:
        if isinstance(item, CucaError):
            self._break_line()
            self.console.warning(str(item))
        elif isinstance(item, Thinking):
            self._thinking(item)
        elif isinstance(item, Text):
            self._answer(item.text)
        elif isinstance(item, ToolCall):
            self._whole_line(tool_call_line(item))
        elif isinstance(item, ImageBase64):
            self._whole_line(f"[image {item.media_type}, {len(item.data)} base64 chars]")
        elif isinstance(item, ToolResult):
            self._whole_line(tool_result_line(item))

    def end(self, response: UnifiedResponse | None) -> None:
        self._finish_output()
        usage = response.usage if response else None
        rate = self.clock.rate(usage.completion_tokens) if usage else None
        self.console.status(usage_line(response, rate))

    def failed(self, error: CucaError) -> None:
        self._finish_output()
        self.console.error(str(error))

    def interrupted(self) -> None:
        self._finish_output()
        self.console.status("cuca: interrupted")

    # -- stdout ----------------------------------------------------------------------

    def _write(self, text: str) -> None:
        if text:
            self.console.out.write(text)
            self.console.out.flush()
            self._line_open = not text.endswith("\n")

    def _thinking(self, block: Thinking) -> None:
        text = "[redacted thinking]\n" if block.redacted else block.text
        if not text:
            return  # an empty delta carrying only a signature
        if self._section != "thinking":
            self._start_section("thinking")
            if self.console.color:
                self.console.out.write(DIM)
            else:
                self._write(THINKING_HEADING + "\n")
        self._write(text)

    def _answer(self, text: str) -> None:
        if not text:
            return
        if self._section != "answer":
            after_thinking = self._section == "thinking"
            self._start_section("answer")
            if after_thinking:  # on a terminal, a blank line after the dim thinking
                self._write("\n" if self.console.color else ANSWER_HEADING + "\n")
        self._write(text)

    def _whole_line(self, line: str) -> None:
        self._start_section(None)
        self._write(line + "\n")

    def _start_section(self, section: str | None) -> None:
        """Close the current section (reset colour, end its line) before another."""
        if self._section == "thinking" and self.console.color:
            self.console.out.write(RESET)
        if self._section is not None and section != self._section:
            self._end_line()
        self._section = section

    def _end_line(self) -> None:
        if self._line_open:
            self._write("\n")

    def _break_line(self) -> None:
        """Before a note on stderr: end stdout's line when both share a terminal."""
        if self.console.out_tty:
            self._start_section(None)

    def _finish_output(self) -> None:
        self._start_section(None)
        self._end_line()
