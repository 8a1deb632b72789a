"""Context: keep a conversation inside the model's window.

:class:`Compactor` is a plugin that shortens a request that does not fit its budget,
with :mod:`strategies <cuca.context.strategies>` applied in order; see docs/context.md.
It imports only the core (types, errors, plugins); the client it counts with is taken
through the :class:`TokenCounter` protocol.
"""

from .compactor import Compactor as Compactor
from .compactor import TokenCounter as TokenCounter
from .conversation import Layout as Layout
from .conversation import layout as layout
from .strategies import ClampMessages as ClampMessages
from .strategies import ClearToolResults as ClearToolResults
from .strategies import DropOldestTurns as DropOldestTurns
from .strategies import Shortened as Shortened
from .strategies import SlidingWindow as SlidingWindow
from .strategies import Strategy as Strategy
from .strategies import SummariseOldestTurns as SummariseOldestTurns
from .strategies import Summariser as Summariser
from .strategies import TokenTarget as TokenTarget

__all__ = [
    "ClampMessages",
    "ClearToolResults",
    "Compactor",
    "DropOldestTurns",
    "Layout",
    "Shortened",
    "SlidingWindow",
    "Strategy",
    "SummariseOldestTurns",
    "Summariser",
    "TokenCounter",
    "TokenTarget",
    "layout",
]
