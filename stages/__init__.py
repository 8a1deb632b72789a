"""The stage actors of a turn and the pipeline that wires them.

A stage is ``async def stage(receive, send) -> None``: it reads batches (lists) from
``receive``, writes batches to ``send`` and closes ``send`` when its input ends. The
built-in points of a turn over HTTP are ``request_hooks``, ``encode``, ``transport``,
``sse_parse``, ``decode`` and ``chunk_hooks``; on the local engine ``request_hooks``,
``engine``, ``output_parse`` and ``chunk_hooks``. Insert your own with :func:`before`
or :func:`after`; :func:`map_items` and :func:`tap` build simple stages from a function.
"""

from .context import Stage as Stage
from .context import TurnContext as TurnContext
from .custom import map_items as map_items
from .custom import tap as tap
from .pipeline import HTTP_POINTS as HTTP_POINTS
from .pipeline import LOCAL_POINTS as LOCAL_POINTS
from .pipeline import Insertion as Insertion
from .pipeline import NamedStage as NamedStage
from .pipeline import Pipeline as Pipeline
from .pipeline import after as after
from .pipeline import before as before
from .sse import SseEvent as SseEvent
from .sse import SseParser as SseParser
