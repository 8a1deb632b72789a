"""A conformance kit for provider adapters, ours and yours.

Give it an adapter (registered with `cuca.register_adapter` for a
``ProviderEndpoint.custom(...)`` name, or any built-in endpoint) and the bytes of one or
more good turns with the blocks each must decode to; `check_adapter` runs every check
over real loopback HTTP against the replay server and raises one `ConformanceError`
listing every failure::

    from cuca.testing.conformance import Transcript, check_adapter

    def test_my_gateway() -> None:
        check_adapter(ProviderEndpoint.custom("gw"), [Transcript("hello", BODY, [Text("Hi")])])

The checks (`CHECKS`): the transcript decodes; any chunking gives the same blocks; a body
cut at any offset gives a prefix of the blocks, then `StreamIncomplete` (or the wire's own
error; a clean end only when nothing was lost); a connection closed mid-body gives
`StreamIncomplete`; a stall with a read timeout gives `ReadTimeout`; every error status,
JSON or HTML, gives the `HttpStatusError` of its kind; garbage and wrongly typed JSON give
typed errors; a turn dropped at any hop leaves no task, thread, file descriptor or open
connection. Hypothesis drives the searches and shrinks what it finds, so each failure
comes with a small reproduction.

Needs Hypothesis (``pip install 'cuca[testing]'``). See ``docs/testing.md``.
"""

from ._checks import CHECKS as CHECKS
from ._model import ANY_ID as ANY_ID
from ._model import ConformanceError as ConformanceError
from ._model import Failure as Failure
from ._model import Subject as Subject
from ._model import Transcript as Transcript
from ._runner import check_adapter as check_adapter
from ._runner import conformance_test as conformance_test
from ._turn import Drop as Drop
from ._turn import Outcome as Outcome
from ._turn import drive as drive
from ._turn import hops as hops
from ._turn import run_turn as run_turn
