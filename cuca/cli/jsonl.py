"""``--json``: one JSON line per stream item, in the library's own converter format.

Blocks are written with :func:`cuca.to_json` (``{"type": "Text", "value": "Hel"}``),
so ``cuca.from_json(line, cuca.Block)`` reads each back. Errors, fatal or not, are
``{"type": "Error", "value": {"kind": "ProviderError", "message": "..."}}``; a turn
that ended cleanly closes with ``{"type": "Response", "value": <UnifiedResponse>}``.
A fatal error is also reported on stderr, like in text mode.
"""

from __future__ import annotations

import json
from typing import Any

from cuca.convert import to_json, unstructure
from cuca.errors import CucaError, ToolCallError
from cuca.types import Block, UnifiedResponse

from .console import Console

__all__ = ["JsonRenderer", "error_record"]


def error_record(error: CucaError) -> dict[str, Any]:
    """The JSON record of an error: its class name and its message (and, for a malformed
    tool call, the call's id and name, which a caller needs to answer it)."""
    value: dict[str, Any] = {"kind": type(error).__name__, "message": str(error)}
    if isinstance(error, ToolCallError):
        value.update(tool_call_id=error.tool_call_id, name=error.name)
    return {"type": "Error", "value": value}


class JsonRenderer:
    """Writes a turn as JSON lines on stdout."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def _line(self, text: str) -> None:
        self.console.out.write(text + "\n")
        self.console.out.flush()

    def begin(self) -> None:
        pass

    def arrived(self) -> None:
        pass

    def item(self, item: Block | CucaError) -> None:
        if isinstance(item, CucaError):
            self._line(json.dumps(error_record(item), ensure_ascii=False))
        else:
            self._line(to_json(item))

    def end(self, response: UnifiedResponse | None) -> None:
        record = {"type": "Response", "value": unstructure(response)}
        self._line(json.dumps(record, ensure_ascii=False))

    def failed(self, error: CucaError) -> None:
        self.item(error)
        self.console.error(str(error))

    def interrupted(self) -> None:
        self.console.status("cuca: interrupted")
