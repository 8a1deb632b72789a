"""The streaming output parser: raw generated text in, Text / Thinking / ToolCall out.

I/O-free, in the shape of h11: :meth:`OutputParser.feed` takes whatever text the engine
produced (any split, down to one character) and returns the items it could decide;
:meth:`OutputParser.close` flushes the rest at the end of generation. Any split of the
same text gives the same blocks once adjacent Text (and Thinking) deltas are merged.

What it recognises, per :class:`~cuca.engine.formats.OutputFormat`:

* reasoning blocks between the format's markers (``<think>``/``</think>``), including a
  generation that starts inside one (``starts_in_thinking``); an unterminated block is
  reasoning up to the end;
* ``ToolSyntax.HERMES``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
* ``ToolSyntax.LLAMA3_JSON``: ``<|python_tag|>{...}`` (several separated by ``;``, or a
  builtin ``tool.call(key="value")``) and an answer that is a bare JSON object
  ``{"name": ..., "parameters"|"arguments": {...}}``;
* ``ToolSyntax.MISTRAL``: ``[TOOL_CALLS][{...}, ...]`` and ``[TOOL_CALLS]name[ARGS]{...}``.

Rules: markers never reach Text (a possible marker prefix at the end of a piece is held
back until the next piece decides it); Text and Thinking are emitted as deltas as they
arrive, a ToolCall once complete; whitespace right after a reasoning block or a tool call
is dropped; an answer starting with ``{`` is held until the object is complete when the
format has Llama 3 JSON calls. A malformed call becomes a
``ToolCallError("local", "malformed tool call: <body>")`` item (with a fresh call id, and
the function's name when it can be read) and parsing goes on.
"""

from __future__ import annotations

import ast
import enum
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeAlias

from cuca.errors import ToolCallError
from cuca.types import ProviderEndpoint, Text, Thinking, ToolCall, new_call_id

from .formats import OutputFormat, ToolSyntax
from .harmony import HARMONY_MARKERS, HarmonyParser
from .streaming import ParsedItem, StreamingParser

__all__ = ["OutputParser", "ParsedItem", "format_markers", "new_call_id", "new_output_parser"]


HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"

_TOOL_MARKERS: dict[ToolSyntax, tuple[str, ...]] = {
    ToolSyntax.HERMES: (HERMES_OPEN,),
    ToolSyntax.LLAMA3_JSON: (PYTHON_TAG,),
    ToolSyntax.MISTRAL: (MISTRAL_CALLS,),
    ToolSyntax.HARMONY: HARMONY_MARKERS,
}
_INLINE_SYNTAXES = (ToolSyntax.HERMES, ToolSyntax.LLAMA3_JSON, ToolSyntax.MISTRAL)
"""The syntaxes this parser reads (harmony has a parser of its own)."""
_Parts: TypeAlias = tuple[str, dict[str, Any]]  # a call's name and arguments
_MAX_MISTRAL_NAME = 256
_WAIT = -1
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_NAMED = re.compile(r'"name"\s*:\s*"([A-Za-z_][\w.\-]*)"')
"""The function's name inside a call too broken to parse, when it can still be read."""
LOCAL = ProviderEndpoint.LOCAL
_LOOKS_LIKE_CALL = re.compile(r'\s*\{\s*"name"\s*:')


def format_markers(fmt: OutputFormat) -> frozenset[str]:
    """Every marker the parser looks for under ``fmt``.

    The engine renders a control token as text only when it is one of these, so the
    parser sees its markers and nothing else of the vocabulary's control tokens.
    """
    markers: set[str] = set(fmt.reasoning or ())
    if fmt.tool_syntax is not None:
        markers.update(_TOOL_MARKERS[fmt.tool_syntax])
    if fmt.tool_syntax is ToolSyntax.MISTRAL:
        markers.update((MISTRAL_ARGS, MISTRAL_CALL_ID))
    return frozenset(markers)


def new_output_parser(
    fmt: OutputFormat, *, thinking_enabled: bool, id_factory: Callable[[], str] = new_call_id
) -> OutputParser | HarmonyParser:
    """The streaming parser for ``fmt``: :class:`~cuca.engine.harmony.HarmonyParser` for
    gpt-oss's harmony messages, :class:`OutputParser` for every other family."""
    if fmt.tool_syntax is ToolSyntax.HARMONY:
        return HarmonyParser(thinking_enabled=thinking_enabled, id_factory=id_factory)
    return OutputParser(fmt, thinking_enabled=thinking_enabled, id_factory=id_factory)


class _Mode(enum.Enum):
    TEXT = "text"
    REASONING = "reasoning"
    HERMES = "hermes"  # inside <tool_call>, waiting for </tool_call>
    JSON_CALL = "json_call"  # scanning one JSON call object (bare or after python_tag)
    JSON_NEXT = "json_next"  # after a JSON call: ';' or whitespace, then maybe another
    PYTHON_TAG = "python_tag"  # after <|python_tag|>, before its body's first character
    PYTHON_CODE = "python_code"  # a python_tag body that is not JSON: read to the end
    MISTRAL = "mistral"  # after [TOOL_CALLS], before its body's first character
    MISTRAL_LIST = "mistral_list"  # scanning [{...}, ...]
    MISTRAL_NAME = "mistral_name"  # reading name up to [ARGS]
    MISTRAL_ARGS = "mistral_args"  # scanning the {...} after [ARGS]


class _BracketMismatch(Exception):
    """A JSON value closed with the wrong bracket: it is not JSON."""


class _JsonScanner:
    """Finds where one JSON object or array ends, resuming where the last call stopped.

    It only tracks strings and brackets (so it is linear in the text), leaving
    validation to :func:`json.loads` once the value is complete.
    """

    _OUTSIDE = re.compile(r'["{}\[\]]')
    _INSIDE = re.compile(r'["\\]')
    _PAIRS: ClassVar[dict[str, str]] = {"}": "{", "]": "["}

    def __init__(self, start: int) -> None:
        self.pos = start
        self._stack: list[str] = []
        self._in_string = False
        self._escape = False

    def scan(self, text: str) -> int | None:
        """The index just past the value's end in ``text``, or ``None`` if not yet."""
        i = self.pos
        while True:
            if self._escape:
                if i >= len(text):
                    break
                i += 1
                self._escape = False
            pattern = self._INSIDE if self._in_string else self._OUTSIDE
            match = pattern.search(text, i)
            if match is None:
                i = len(text)
                break
            char, i = match.group(), match.end()
            if self._in_string:
                self._escape = char == "\\"
                self._in_string = char != '"'
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._stack.append(char)
            elif not self._stack or self._stack.pop() != self._PAIRS[char]:
                self.pos = i
                raise _BracketMismatch
            elif not self._stack:
                self.pos = i
                return i
        self.pos = i
        return None


BAD_JSON = (ValueError, TypeError, RecursionError, MemoryError)
"""What parsing model output may raise: malformed, mistyped or absurdly nested text."""


def _is_json(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _arguments(value: object) -> dict[str, Any] | None:
    """Tool arguments as an object: an object, null, or a string holding an object."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except BAD_JSON:
            return None
    return value if isinstance(value, dict) else None


def _call_parts(obj: object, *, require_arguments: bool) -> _Parts | None:
    """``(name, arguments)`` of a JSON call object, or ``None`` if it is not one.

    ``require_arguments``: the object must carry ``arguments`` or ``parameters`` (for a
    bare JSON answer, which is only a call if it has the full shape).
    """
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return None
    key = "arguments" if "arguments" in obj else "parameters"
    if require_arguments and key not in obj:
        return None
    arguments = _arguments(obj.get(key))
    return None if arguments is None else (name, arguments)


def _builtin_call(body: str) -> _Parts | None:
    """A Llama 3 builtin call ``tool.call(key="value", ...)`` as ``(name, arguments)``."""
    try:
        tree = ast.parse(body.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    call = tree.body
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "call"
        and isinstance(call.func.value, ast.Name)
        and not call.args
    ):
        return None
    arguments: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            return None
        try:
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
        except BAD_JSON:
            return None
    if not _is_json(arguments):  # a set or bytes literal has no JSON form
        return None
    return call.func.value.id, arguments


def _find_first(text: str, markers: Sequence[str]) -> tuple[int, str | None]:
    """The earliest marker in ``text`` and its index (the longest one on a tie)."""
    best, found = len(text), None
    for marker in markers:
        i = text.find(marker, 0, best + len(marker))
        if i != -1 and (i < best or (i == best and found is not None and len(marker) > len(found))):
            best, found = i, marker
    return best, found


def _held_suffix(text: str, markers: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could begin a marker."""
    held = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), held, -1):
            if text.endswith(marker[:k]):
                held = k
                break
    return held


class OutputParser(StreamingParser[ParsedItem]):
    """Turns generated text into blocks, incrementally (see the module docstring).

    ``fmt`` says which markers and tool syntax to expect; ``thinking_enabled`` is
    whether the request enabled thinking, which decides whether reasoning tokens are
    counted (:meth:`reasoning_token_count`); reasoning blocks are recognised either way,
    since some models always reason. ``id_factory`` makes tool-call ids.
    """

    def __init__(
        self,
        fmt: OutputFormat,
        *,
        thinking_enabled: bool,
        id_factory: Callable[[], str] = new_call_id,
    ) -> None:
        super().__init__(thinking_enabled=thinking_enabled)
        self.fmt = fmt
        self._new_id = id_factory
        self._mode = _Mode.TEXT
        self._skip_ws = False
        self._answer_start = True
        self._scanner: _JsonScanner | None = None
        self._from_python_tag = False
        self._search_from = 0
        self._call_name = ""
        reasoning = fmt.reasoning
        self._text_markers: tuple[str, ...] = (
            *(reasoning or ()),
            *(_TOOL_MARKERS[fmt.tool_syntax] if fmt.tool_syntax in _INLINE_SYNTAXES else ()),
        )
        self._end_marker = reasoning[1] if reasoning else ""
        if reasoning and fmt.starts_in_thinking:
            self._enter_reasoning(0)

    # -- public --------------------------------------------------------------------

    @property
    def in_reasoning(self) -> bool:
        """Whether the text fed last ended inside a reasoning block."""
        return self._mode is _Mode.REASONING

    # -- plumbing ------------------------------------------------------------------

    def _emit_text(self, out: list[ParsedItem], n: int) -> None:
        text = self._consume(n)
        if not text:
            return
        self._answer_start = False
        if out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].text + text)
        else:
            out.append(Text(text))

    def _emit_thinking(self, out: list[ParsedItem], n: int) -> None:
        text = self._consume(n)
        if not text:
            return
        if out and isinstance(out[-1], Thinking):
            out[-1] = Thinking(out[-1].text + text, provider=LOCAL)
        else:
            out.append(Thinking(text, provider=LOCAL))

    def _emit_call(
        self, out: list[ParsedItem], parts: _Parts | None, body: str, name: str | None = None
    ) -> None:
        if parts is None:
            raw = body.strip()
            named = _NAMED.search(raw)
            out.append(
                ToolCallError(
                    "local",
                    f"malformed tool call: {raw}",
                    tool_call_id=self._new_id(),
                    name=name if name is not None else named.group(1) if named else None,
                    raw=raw,
                )
            )
        else:
            out.append(ToolCall(id=self._new_id(), name=parts[0], arguments=parts[1]))

    def _to_text(self, *, skip_ws: bool = True) -> None:
        self._mode = _Mode.TEXT
        self._skip_ws = skip_ws
        self._scanner = None

    def _enter_reasoning(self, start: int) -> None:
        self._mode = _Mode.REASONING
        self._spans.append([start])

    def _strip_leading_ws(self) -> bool:
        """Drop leading whitespace; true when something else is left to look at."""
        stripped = self._buf.lstrip()
        self._consume(len(self._buf) - len(stripped))
        return bool(self._buf)

    def _step(self, out: list[ParsedItem], final: bool) -> bool:
        """Advance in the current mode; true when the mode changed and the loop goes on."""
        return _HANDLERS[self._mode](self, out, final)

    # -- modes ---------------------------------------------------------------------

    def _text(self, out: list[ParsedItem], final: bool) -> bool:
        if self._skip_ws:
            if not self._strip_leading_ws():
                return False
            self._skip_ws = False
        if self._answer_start and self.fmt.tool_syntax is ToolSyntax.LLAMA3_JSON:
            stripped = self._buf.lstrip()
            if not stripped:
                if final:
                    self._emit_text(out, len(self._buf))
                return False
            if stripped[0] == "{":
                self._mode = _Mode.JSON_CALL
                self._from_python_tag = False
                self._scanner = _JsonScanner(len(self._buf) - len(stripped))
                return True
            self._answer_start = False
        index, marker = _find_first(self._buf, self._text_markers)
        if marker is None:
            held = 0 if final else _held_suffix(self._buf, self._text_markers)
            self._emit_text(out, len(self._buf) - held)
            return False
        self._emit_text(out, index)
        start = self._pos
        self._consume(len(marker))
        reasoning = self.fmt.reasoning
        if reasoning is not None and marker == reasoning[0]:
            self._enter_reasoning(start)
        elif reasoning is not None and marker == reasoning[1]:
            self._skip_ws = True  # a stray end marker: dropped, never shown as text
        elif marker == HERMES_OPEN:
            self._mode, self._search_from = _Mode.HERMES, 0
        elif marker == PYTHON_TAG:
            self._mode = _Mode.PYTHON_TAG
        else:
            self._mode = _Mode.MISTRAL
        return True

    def _reasoning(self, out: list[ParsedItem], final: bool) -> bool:
        end = self._end_marker
        index = self._buf.find(end)
        if index == -1:
            held = 0 if final else _held_suffix(self._buf, (end,))
            self._emit_thinking(out, len(self._buf) - held)
            return False
        self._emit_thinking(out, index)
        self._consume(len(end))
        self._spans[-1].append(self._pos)
        self._to_text()
        self._answer_start = True
        return True

    def _hermes(self, out: list[ParsedItem], final: bool) -> bool:
        index = self._buf.find(HERMES_CLOSE, self._search_from)
        if index == -1:
            if not final:
                self._search_from = max(0, len(self._buf) - len(HERMES_CLOSE) + 1)
                return False
            body = self._consume(len(self._buf))
        else:
            body = self._consume(index)
            self._consume(len(HERMES_CLOSE))
        self._emit_call(out, self._parse_call(body, require_arguments=False), body)
        self._to_text()
        return True

    def _parse_call(self, body: str, *, require_arguments: bool) -> _Parts | None:
        try:
            obj = json.loads(body)
        except BAD_JSON:
            return None
        return _call_parts(obj, require_arguments=require_arguments)

    def _json_call(self, out: list[ParsedItem], final: bool) -> bool:
        end = self._scan(final)
        if end == _WAIT:
            return False
        length = len(self._buf) if end is None else end
        body = self._buf[:length]
        try:
            obj: object = json.loads(body) if end is not None else None
            valid = end is not None
        except BAD_JSON:
            obj, valid = None, False
        parts = _call_parts(obj, require_arguments=not self._from_python_tag)
        if parts is not None:
            self._consume(length)
            self._emit_call(out, parts, body)
            self._mode, self._scanner = _Mode.JSON_NEXT, None
            return True
        if self._from_python_tag or (not valid and _LOOKS_LIKE_CALL.match(body)):
            self._consume(length)
            self._emit_call(out, None, body)
            self._to_text()
            return True
        # An ordinary answer that happens to start with "{": it is text after all.
        self._emit_text(out, length)
        self._to_text(skip_ws=False)
        return True

    def _scan(self, final: bool) -> int | None:
        """Run the JSON scanner over the buffer: where the value ends (just past a
        bracket that breaks it, if one does), ``None`` when the output ended first, or
        ``_WAIT`` for more text."""
        assert self._scanner is not None
        try:
            end = self._scanner.scan(self._buf)
        except _BracketMismatch:
            return self._scanner.pos
        if end is None and not final:
            return _WAIT
        return end

    def _json_next(self, out: list[ParsedItem], final: bool) -> bool:
        stripped = self._buf.lstrip().lstrip(";").lstrip()
        while stripped != self._buf:
            self._consume(len(self._buf) - len(stripped))
            stripped = self._buf.lstrip().lstrip(";").lstrip()
        if not self._buf:
            return False
        if self._buf[0] == "{":
            self._mode, self._scanner = _Mode.JSON_CALL, _JsonScanner(0)
            return True
        self._to_text(skip_ws=False)
        self._answer_start = False
        return True

    def _python_tag(self, out: list[ParsedItem], final: bool) -> bool:
        if not self._strip_leading_ws():
            if final:
                self._emit_call(out, None, "")
                self._to_text()
                return True
            return False
        self._from_python_tag = True
        if self._buf[0] == "{":
            self._mode, self._scanner = _Mode.JSON_CALL, _JsonScanner(0)
        else:
            self._mode = _Mode.PYTHON_CODE
        return True

    def _python_code(self, out: list[ParsedItem], final: bool) -> bool:
        if not final:
            return False
        body = self._consume(len(self._buf))
        self._emit_call(out, _builtin_call(body), body)
        self._to_text()
        return True

    def _mistral(self, out: list[ParsedItem], final: bool) -> bool:
        if not self._strip_leading_ws():
            if final:
                self._emit_call(out, None, "")
                self._to_text()
                return True
            return False
        if self._buf[0] == "[":
            self._mode, self._scanner = _Mode.MISTRAL_LIST, _JsonScanner(0)
        else:
            self._mode, self._search_from = _Mode.MISTRAL_NAME, 0
        return True

    def _mistral_list(self, out: list[ParsedItem], final: bool) -> bool:
        end = self._scan(final)
        if end == _WAIT:
            return False
        body = self._consume(len(self._buf) if end is None else end)
        try:
            calls = json.loads(body)
        except BAD_JSON:
            calls = None
        if not isinstance(calls, list) or not calls:
            self._emit_call(out, None, body)
        else:
            for call in calls:
                text = json.dumps(call, ensure_ascii=False)
                self._emit_call(out, _call_parts(call, require_arguments=False), text)
        self._to_text()
        return True

    def _mistral_name(self, out: list[ParsedItem], final: bool) -> bool:
        index = self._buf.find(MISTRAL_ARGS, self._search_from)
        if index == -1:
            if not final and len(self._buf) <= _MAX_MISTRAL_NAME:
                self._search_from = max(0, len(self._buf) - len(MISTRAL_ARGS) + 1)
                return False
            self._emit_call(out, None, self._consume(len(self._buf)))
            self._to_text()
            return True
        name = self._consume(index).split(MISTRAL_CALL_ID, 1)[0].strip()
        self._consume(len(MISTRAL_ARGS))
        self._call_name = name
        self._mode, self._scanner = _Mode.MISTRAL_ARGS, None
        return True

    def _mistral_args(self, out: list[ParsedItem], final: bool) -> bool:
        head = f"{self._call_name}{MISTRAL_ARGS}"
        name = self._call_name if _NAME.fullmatch(self._call_name) else None
        if self._scanner is None:
            if not self._strip_leading_ws():
                if final:
                    self._emit_call(out, None, head, name)
                    self._to_text()
                    return True
                return False
            if self._buf[0] != "{":
                self._emit_call(out, None, head, name)
                self._to_text(skip_ws=False)
                return True
            self._scanner = _JsonScanner(0)
        end = self._scan(final)
        if end == _WAIT:
            return False
        body = self._consume(len(self._buf) if end is None else end)
        parts: _Parts | None = None
        if end is not None and name is not None:
            try:
                arguments = _arguments(json.loads(body))
            except BAD_JSON:
                arguments = None
            if arguments is not None:
                parts = (self._call_name, arguments)
        self._emit_call(out, parts, head + body, name)
        self._to_text()
        return True


_HANDLERS: Mapping[_Mode, Callable[[OutputParser, list[ParsedItem], bool], bool]] = {
    _Mode.TEXT: OutputParser._text,
    _Mode.REASONING: OutputParser._reasoning,
    _Mode.HERMES: OutputParser._hermes,
    _Mode.JSON_CALL: OutputParser._json_call,
    _Mode.JSON_NEXT: OutputParser._json_next,
    _Mode.PYTHON_TAG: OutputParser._python_tag,
    _Mode.PYTHON_CODE: OutputParser._python_code,
    _Mode.MISTRAL: OutputParser._mistral,
    _Mode.MISTRAL_LIST: OutputParser._mistral_list,
    _Mode.MISTRAL_NAME: OutputParser._mistral_name,
    _Mode.MISTRAL_ARGS: OutputParser._mistral_args,
}
