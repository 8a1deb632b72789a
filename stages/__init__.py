"""The stages of a turn and the pipeline that wires them.

The built-in points of a turn, and the item type at each hop, are declared once in
:mod:`cuca.stages.points`: over HTTP ``request_hooks``, ``encode``, ``transport``,
``sse_parse``, ``decode`` and ``chunk_hooks``; on the local engine ``request_hooks``,
``engine``, ``output_parse`` and ``chunk_hooks``. One runner (:mod:`cuca.stages.runner`)
runs them fused into the consumer's pull (the default: a channel only around a user
stage) or each as its own actor on memory channels (``fused=False``). Insert your
own with :func:`before` or :func:`after` (a point, or its name); :func:`map_items` and
:func:`tap` build simple stages from a function, and :func:`redact_text` hides secrets in
streamed text, across delta boundaries.
"""

from cuca.turn import EndOfTurn as EndOfTurn

from .custom import map_items as map_items
from .custom import tap as tap
from .items import EncodedRequest as EncodedRequest
from .items import ResponseHead as ResponseHead
from .pipeline import Insertion as Insertion
from .pipeline import NamedStage as NamedStage
from .pipeline import Pipeline as Pipeline
from .pipeline import Stage as Stage
from .pipeline import after as after
from .pipeline import before as before
from .points import CHUNK_HOOKS as CHUNK_HOOKS
from .points import DECODE as DECODE
from .points import ENCODE as ENCODE
from .points import ENGINE as ENGINE
from .points import HTTP_PIPELINE as HTTP_PIPELINE
from .points import HTTP_POINTS as HTTP_POINTS
from .points import LOCAL_PIPELINE as LOCAL_PIPELINE
from .points import LOCAL_POINTS as LOCAL_POINTS
from .points import OUTPUT_PARSE as OUTPUT_PARSE
from .points import REQUEST_HOOKS as REQUEST_HOOKS
from .points import SSE_PARSE as SSE_PARSE
from .points import TRANSPORT as TRANSPORT
from .points import Point as Point
from .redact import Redactor as Redactor
from .redact import redact_text as redact_text
from .sse import SseEvent as SseEvent
from .sse import SseParser as SseParser
