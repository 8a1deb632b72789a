"""Line editing and history for ``cuca chat`` on a terminal.

``input()`` edits lines (arrows, Ctrl-R...) only once :mod:`readline` is imported. The
history of a session is kept in a file of its own under the user's cache directory
(``$XDG_CACHE_HOME/cuca/history/``, else ``~/.cache/cuca/history/``): one per session
log (``--log PATH``), else one shared ``default``. ``--no-history`` or
``CUCA_HISTORY=off`` keeps none.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["HISTORY_LENGTH", "history_file", "line_editing"]

HISTORY_LENGTH = 1000
"""Lines kept per history file."""

_OFF = frozenset({"0", "off", "no", "false"})


def history_file(env: Mapping[str, str], log: Path | None, wanted: bool = True) -> Path | None:
    """Where the session's history is kept, or ``None`` when it is not (``wanted`` is
    ``--no-history``'s opposite)."""
    if not wanted or env.get("CUCA_HISTORY", "").strip().lower() in _OFF:
        return None
    cache = env.get("XDG_CACHE_HOME", "").strip()
    base = (Path(cache) if cache else Path.home() / ".cache") / "cuca" / "history"
    if log is None:
        return base / "default"
    key = hashlib.sha256(str(log.expanduser().resolve()).encode()).hexdigest()[:16]
    return base / f"{log.stem}-{key}"


@contextmanager
def line_editing(path: Path | None) -> Iterator[None]:
    """Within the block, ``input()`` edits lines with readline and recalls the lines of
    ``path`` (written back at the end); without readline (Windows), plain input."""
    try:
        import readline
    except ImportError:  # pragma: no cover - every POSIX Python has it
        yield
        return
    readline.clear_history()
    readline.set_history_length(HISTORY_LENGTH)
    if path is not None and path.is_file():
        try:
            readline.read_history_file(path)
        except OSError:
            pass  # an unreadable history is not worth failing a session for
    try:
        yield
    finally:
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(path)
            except OSError:
                pass
