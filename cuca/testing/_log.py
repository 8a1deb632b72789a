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
    ``raw=True`` and be an HTTP turn (otherwise `ValueError`, saying which: the local
    engine receives no bytes, so its turns have none to replay).
    """
    if turn.raw is None:
        if turn.provider == "local":
            raise ValueError(
                f"turn {turn.id} ran on the local engine, which receives no bytes to "
                "replay: raw=True keeps the response bytes of HTTP turns only"
            )
        raise ValueError(
            f"turn {turn.id} has no raw bytes: log it with SessionLog(path, raw=True)"
        )
    return Reply(turn.raw, chunks=chunks)
