"""The streaming parser of gpt-oss's harmony format: raw output in, blocks out.

A harmony answer is a run of messages, each a header and a body::

    <|channel|>analysis<|message|>Reasoning...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
    <|message|>{"city": "Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>The answer.<|return|>

(one line per message in the output; the call is cut here to fit).

The generation prompt already holds the first ``<|start|>assistant``. The channel says
what a body is: ``analysis`` is reasoning (Thinking), ``final`` the answer (Text), and
``commentary`` either a tool call (when the header names a recipient ``to=functions.NAME``,
which may also sit in the role part) or text for the user. ``<|return|>`` and ``<|call|>``
end generation, so the engine never passes them on: a body also ends where the output
does.

I/O-free like :class:`~cuca.engine.output.OutputParser`, with the same interface: any
split of the same text gives the same blocks once adjacent deltas are merged; a marker
cut between pieces is held back until the next piece decides it; a call whose arguments
are not a JSON object becomes a ``ToolCallError("local", "malformed tool call: ...")``
carrying a fresh call id and the function's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from cuca.errors import ToolCallError
from cuca.types import ProviderEndpoint, Text, Thinking, ToolCall, new_call_id

from .streaming import ParsedItem, StreamingParser

__all__ = ["HARMONY_MARKERS", "HarmonyParser"]

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, CALL, RETURN, CONSTRAIN = "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"
HARMONY_MARKERS = (START, CHANNEL, MESSAGE, END, CALL, RETURN, CONSTRAIN)
"""Every control token of the format: the engine shows their text to the parser."""

_HEADER_STARTS = (START, CHANNEL)
_BODY_ENDS = (END, CALL, RETURN)
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")

LOCAL = ProviderEndpoint.LOCAL


def _held(text: str, markers: Sequence[str]) -> int:
    """The length of the longest suffix of ``text`` that starts one of ``markers``."""
    for size in range(min(len(text), max(map(len, markers)) - 1), 0, -1):
        tail = text[-size:]
        if any(marker.startswith(tail) for marker in markers):
            return size
    return 0


def _first(text: str, markers: Sequence[str]) -> tuple[int, str | None]:
    found = [(text.find(m), m) for m in markers if m in text]
    return min(found) if found else (-1, None)


class HarmonyParser(StreamingParser[ParsedItem]):
    """Turns harmony output into blocks, incrementally (see the module docstring).

    ``thinking_enabled`` decides whether reasoning tokens are counted; ``id_factory``
    makes tool-call ids.
    """

    def __init__(
        self, *, thinking_enabled: bool, id_factory: Callable[[], str] = new_call_id
    ) -> None:
        super().__init__(thinking_enabled=thinking_enabled)
        self._new_id = id_factory
        self._in_header = False  # between <|start|>/<|channel|> and <|message|>
        self._header = ""
        self._body: str | None = None  # the kind of the body being read, None: outside
        self._recipient = ""
        self._call_body = ""
        self._skip_ws = True  # whitespace between messages is dropped
        self._header_start = 0

    def _at_end(self, out: list[ParsedItem]) -> None:
        if self._body is not None:  # the body the end of generation cut off
            self._end_body(out)

    # -- states --------------------------------------------------------------------

    def _step(self, out: list[ParsedItem], final: bool) -> bool:
        if self._in_header:
            return self._read_header(final)
        if self._body is None:
            return self._outside(out, final)
        return self._read_body(out, final)

    def _outside(self, out: list[ParsedItem], final: bool) -> bool:
        """Between messages: leading whitespace is dropped, plain text is the answer."""
        if self._skip_ws:
            stripped = self._buf.lstrip()
            self._consume(len(self._buf) - len(stripped))
            if not stripped:
                return False
            self._skip_ws = False
        index, marker = _first(self._buf, (*_HEADER_STARTS, *_BODY_ENDS))
        if marker is None:
            held = 0 if final else _held(self._buf, HARMONY_MARKERS)
            self._emit(out, Text, len(self._buf) - held)
            return False
        self._emit(out, Text, index)
        if marker in _BODY_ENDS:  # a stray end: dropped
            self._consume(len(marker))
            return True
        self._header_start = self._pos
        self._in_header, self._header = True, ""
        return True

    def _read_header(self, final: bool) -> bool:
        index = self._buf.find(MESSAGE)
        if index == -1:
            if final:
                self._consume(len(self._buf))  # a header cut off by the end: nothing
            return False
        self._header = self._consume(index)
        self._consume(len(MESSAGE))
        self._in_header = False
        channel = _CHANNEL_NAME.search(self._header)
        recipient = _RECIPIENT.search(self._header)
        self._recipient = recipient.group(1) if recipient else ""
        name = channel.group(1) if channel else "final"
        if self._recipient:
            self._body, self._call_body = "call", ""
        elif name == "analysis":
            self._body = "analysis"
            self._spans.append([self._header_start])
        else:
            self._body = "text"
        return True

    def _read_body(self, out: list[ParsedItem], final: bool) -> bool:
        index, marker = _first(self._buf, (*_BODY_ENDS, START))
        if marker is None:
            held = 0 if final else _held(self._buf, HARMONY_MARKERS)
            self._body_piece(out, len(self._buf) - held)
            return False
        self._body_piece(out, index)
        if marker != START:
            self._consume(len(marker))
        self._end_body(out)
        return True

    def _body_piece(self, out: list[ParsedItem], n: int) -> None:
        if self._body == "call":
            self._call_body += self._consume(n)
        else:
            self._emit(out, Thinking if self._body == "analysis" else Text, n)

    def _end_body(self, out: list[ParsedItem]) -> None:
        if self._body == "analysis":
            self._spans[-1].append(self._pos)
        elif self._body == "call":
            out.append(self._call())
        self._body = None
        self._skip_ws = True

    def _call(self) -> ParsedItem:
        body, recipient = self._call_body.strip(), self._recipient
        name = recipient.removeprefix("functions.")
        try:
            arguments = json.loads(body) if body else {}
        except (ValueError, RecursionError):
            arguments = None
        if not name or not isinstance(arguments, dict):
            return ToolCallError(
                "local",
                f"malformed tool call: {recipient} {body}".strip(),
                tool_call_id=self._new_id(),
                name=name or None,
                raw=body,
            )
        return ToolCall(id=self._new_id(), name=name, arguments=arguments)

    def _emit(self, out: list[ParsedItem], kind: type[Text] | type[Thinking], n: int) -> None:
        text = self._consume(n)
        if not text:
            return
        last = out[-1] if out else None
        if isinstance(last, kind):
            text = last.text + text
            out.pop()
        out.append(Thinking(text, provider=LOCAL) if kind is Thinking else Text(text))
