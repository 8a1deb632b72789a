"""Replaying a logged turn: the raw bytes a `SessionLog(path, raw=True)` kept, as a `Reply`."""

from __future__ import annotations

from collections.abc import Iterable

from cuca.observers.session_log import LoggedTurn

from ._reply import Reply

__all__ = ["logged_reply"]


def logged_reply(turn: LoggedTurn, *, chunks: Iterable[int] | None = None) -> Reply:
    """A replay-server `Reply` sending the response body of a logged ``turn`` again, byte
    for byte, first in writes of the sizes in ``chunks``.

    Record a turn once against the real vendor, then test the adapter and your stages
    against those exact bytes at every chunking. The turn must have been logged with
    ``raw=True`` (otherwise `ValueError`).
    """
    if turn.raw is None:
        raise ValueError(
            f"turn {turn.id} has no raw bytes: log it with SessionLog(path, raw=True)"
        )
    return Reply(turn.raw, chunks=chunks)
