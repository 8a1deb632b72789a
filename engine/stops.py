"""Stop sequences on the local engine: the answer ends where the model writes one.

A stop sequence may arrive split across tokens (``"\\n\\n"`` as two ``"\\n"``), so
:class:`StopMatcher` holds back the end of the text that could still begin one and
shows it only once the next token rules that out. When a sequence is complete, the text
before it is shown, the sequence and anything after it are not, and the turn ends with
``finish_reason`` ``"stop"`` (``provider_finish_reason`` ``"stop_sequence"``). Every
token sampled counts in ``completion_tokens``, the one that completed the sequence too.

The sequences are matched on the text the model writes, reasoning included, as
llama-server matches its ``stop`` strings.
"""

from __future__ import annotations

__all__ = ["StopMatcher"]


class StopMatcher:
    """Finds the first of ``stops`` in a text fed piece by piece (I/O-free)."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(stop for stop in stops if stop)
        self._held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """The text that can be shown now, and whether a stop sequence ended the answer
        (the text returned is then everything before it)."""
        buffer = self._held + text
        found = [index for stop in self._stops if (index := buffer.find(stop)) >= 0]
        if found:
            self._held = ""
            return buffer[: min(found)], True
        keep = max((self._partial(buffer, stop) for stop in self._stops), default=0)
        self._held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """The text held back when the answer ends without a stop sequence."""
        held, self._held = self._held, ""
        return held

    @staticmethod
    def _partial(buffer: str, stop: str) -> int:
        """The length of the longest end of ``buffer`` that begins ``stop``."""
        for size in range(min(len(stop) - 1, len(buffer)), 0, -1):
            if buffer.endswith(stop[:size]):
                return size
        return 0
