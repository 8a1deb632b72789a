"""Partial objects while a structured answer streams: the JSON parsed so far, after
each block that completes a value.

:class:`PartialJson` is I/O-free: ``feed(text)`` appends a delta and returns the value
decided so far when it changed. It parses with jiter's partial mode (the parser pydantic
uses), which accepts an incomplete document and leaves out the value still being
written: an unfinished string, literal or number. A trailing number is held back until
something follows it (``1`` may become ``12``), so every field, once shown, keeps its
value: each partial is a prefix-consistent view of the final answer.

jiter parses the whole text so far each time, so parsing after every block would cost
quadratic time in a long answer: up to ``EXACT_UP_TO`` characters every block that may
complete a value is parsed; past it, the text is parsed again once it has grown by an
eighth since the last parse (linear in total; a partial then lags by at most an eighth
of the text). ``tests/benchmarks/bench_partial.py`` measures both.

:class:`Partials` is the async iterator behind ``stream.partial()``: it reads the
stream's batches, yields a dict (or, for a class, a :class:`PartialObject`) each time
the value grows, and at the end the parsed answer itself (``Completion.parsed``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
import jiter

from .errors import OutputValidationError
from .schema import parse_output
from .types import OutputSchema, Text

__all__ = ["PartialJson", "PartialObject", "Partials"]

_NOTHING: Any = object()
_MAY_COMPLETE = re.compile(r'[",}\]el\s]')
"""A delta without any of these cannot complete a value (a string's closing quote, a
separator, a container's end, the last letter of true/false/null, space after a number)."""
_TRAILING_NUMBER = re.compile(r"[-+0-9.eE]+$")
EXACT_UP_TO = 2048
"""Up to this many characters, every block that may complete a value is parsed."""


class PartialJson:
    """The JSON value of a text that arrives in pieces (see the module)."""

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._size = 0
        self._parsed_at = 0  # the size of the text at the last parse
        self.value: Any = _NOTHING

    @property
    def text(self) -> str:
        """Everything fed so far."""
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def feed(self, piece: str) -> Any:
        """Add ``piece``; return the value decided so far if it changed, else
        :data:`NOTHING` (also while nothing is decided yet)."""
        self._pieces.append(piece)
        self._size += len(piece)
        if not _MAY_COMPLETE.search(piece):
            return _NOTHING
        if self._size > EXACT_UP_TO and self._size < self._parsed_at + self._parsed_at // 8:
            return _NOTHING  # a long answer: parsed again once it has grown by an eighth
        return self._parse()

    def end(self) -> Any:
        """The text is complete: the value of all of it if it changed, else
        :data:`NOTHING` (a long answer's last blocks may not have been parsed)."""
        return self._parse() if self._parsed_at < self._size else _NOTHING

    def _parse(self) -> Any:
        self._parsed_at = self._size
        text = self.text.rstrip()
        if text and text[-1] in "0123456789.eE+-":
            text = _TRAILING_NUMBER.sub("", text)  # the number may go on
        if not text:
            return _NOTHING
        try:
            value = jiter.from_json(text.encode(), partial_mode="on")
        except ValueError:  # not JSON at all (prose before the braces): nothing decided
            return _NOTHING
        if value == self.value:
            return _NOTHING
        self.value = value
        return value


NOTHING = _NOTHING
"""What :meth:`PartialJson.feed` returns when the value did not change."""


@attrs.frozen
class PartialObject:
    """An answer for class ``of`` still arriving: ``values`` are the fields decided so
    far (as JSON values). A field of the class that is not decided yet reads ``None``;
    ``decided(name)`` tells the two apart."""

    of: type
    values: Mapping[str, Any]

    def decided(self, name: str) -> bool:
        return name in self.values

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "values")
        if name in values:
            return values[name]
        if name in _field_names(object.__getattribute__(self, "of")):
            return None
        raise AttributeError(name)


def _field_names(cls: type) -> set[str]:
    if attrs.has(cls):
        return {field.alias or field.name for field in attrs.fields(cls)}
    fields = getattr(cls, "model_fields", None)  # pydantic
    return set(fields) if isinstance(fields, Mapping) else set()


class BatchSource(Protocol):
    """What the partials are read from (a :class:`~cuca.ResponseStream`)."""

    async def receive_batch(self) -> Sequence[Any]: ...


class Partials:
    """``stream.partial()``: the answer parsed so far, as it arrives (see the module).

    It reads the same stream: the stream's items are consumed by it (errors that did
    not end the turn are skipped; one that ended it is raised). After the last one,
    ``stream.message`` and ``stream.response`` hold the whole turn.
    """

    def __init__(self, source: BatchSource, schema: OutputSchema) -> None:
        self._source = source
        self._schema = schema
        self._parser = PartialJson()
        self._ready: list[Any] = []
        self._last: Any = _NOTHING
        self._ended = False

    def __aiter__(self) -> Partials:
        return self

    async def __anext__(self) -> Any:
        while not self._ready:
            if self._ended:
                raise StopAsyncIteration
            try:
                batch = await self._source.receive_batch()
            except StopAsyncIteration:
                self._ended = True
                self._finish()
                continue
            self._read(batch)
        return self._ready.pop(0)

    def _read(self, batch: Sequence[Any]) -> None:
        for item in batch:
            if isinstance(item, Text):
                value = self._parser.feed(item.text)
                if value is not _NOTHING:
                    self._push(self._view(value))

    def _view(self, value: Any) -> Any:
        target = self._schema.target
        if target is not None and isinstance(value, dict):
            return PartialObject(target, value)
        return value

    def _push(self, value: Any) -> None:
        self._last = value
        self._ready.append(value)

    def _finish(self) -> None:
        """The whole answer, parsed as ``Completion.parsed`` is, last (when it fits)."""
        value = self._parser.end()
        if value is not _NOTHING:
            self._push(self._view(value))
        try:
            final = parse_output(self._schema, self._parser.text)
        except OutputValidationError:
            return
        if self._last is _NOTHING or final != self._last:
            self._push(final)
