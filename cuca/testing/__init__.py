"""Tools for testing code built on cuca: scripted replies, a replay server and
Hypothesis strategies.

Scripted replies (`open_scripted_server`, `Script`) serve the turns a test writes as
cuca blocks (`ScriptedTurn`, `ScriptedError`) in any wire's exact framing, so an
application's tests run the whole real pipeline without a hand-written stream.

The replay server (`open_replay_server`) answers real HTTP requests on loopback with
scripted `Reply` values: chunked, paced, stalled, cut or endless; `logged_reply` replays a
turn recorded by `cuca.SessionLog` with its raw bytes. The strategies
(`chunkings`, `chunk_sizes`, `split_points`) need Hypothesis, which the ``testing`` extra
installs; they are imported on first use, so the rest works without it.

`cuca.testing.conformance` (also needs Hypothesis) runs the conformance suite of the
built-in adapters on any provider adapter: ``check_adapter(endpoint, transcripts)``.
"""

import typing as _typing

from ._feed import Feedable as Feedable
from ._feed import feed_chunks as feed_chunks
from ._log import logged_reply as logged_reply
from ._replay import ReplayServer as ReplayServer
from ._replay import Replies as Replies
from ._replay import open_replay_server as open_replay_server
from ._reply import RecordedRequest as RecordedRequest
from ._reply import Reply as Reply
from ._scripted import Script as Script
from ._scripted import ScriptedError as ScriptedError
from ._scripted import ScriptedServer as ScriptedServer
from ._scripted import ScriptedTurn as ScriptedTurn
from ._scripted import ScriptExhausted as ScriptExhausted
from ._scripted import open_scripted_server as open_scripted_server

if _typing.TYPE_CHECKING:
    from ._strategies import chunk_sizes as chunk_sizes
    from ._strategies import chunkings as chunkings
    from ._strategies import split_points as split_points

_STRATEGIES = frozenset({"chunk_sizes", "chunkings", "split_points"})


def __getattr__(name: str) -> _typing.Any:
    """Import the Hypothesis strategies on first use only."""
    if name not in _STRATEGIES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from . import _strategies
    except ImportError as exc:
        raise ImportError(
            f"cuca.testing.{name} needs Hypothesis: pip install 'cuca[testing]'"
        ) from exc
    return getattr(_strategies, name)


def __dir__() -> list[str]:
    """List the lazy strategies too, so that dir() shows the whole public surface."""
    return sorted({*globals(), *_STRATEGIES})
