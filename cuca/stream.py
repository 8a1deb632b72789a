"""The consumer's side of a turn: an async iterator of items, then a response."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
import trio

from .errors import CucaError, OutputValidationError, PluginError
from .turn import EndOfTurn, Item, TurnState, split_end
from .types import (
    Block,
    MessageRole,
    OutputSchema,
    Text,
    Thinking,
    UnifiedMessage,
    UnifiedRequest,
    UnifiedResponse,
)

if TYPE_CHECKING:
    from cuca.stages.runner import Puller

__all__ = ["Completion", "ResponseStream", "merge_blocks"]


class ResponseStream:
    """The items of one turn, one at a time: blocks, and ``CucaError`` instances for
    errors that did not end the turn. An error that ended the turn is raised from the
    iteration after every item produced before it. ``response`` is set once the stream
    has ended cleanly, from the turn's :class:`~cuca.turn.EndOfTurn`.

    The stream pulls its batches from the turn's :class:`~cuca.stages.runner.Puller`: in
    a fused turn, the last stages run in the task that iterates it. ``on_end(cancelled)`` is
    called once, when the turn has ended, before the consumer sees the end (or when it
    left early: the client then calls ``_close``).
    """

    def __init__(
        self,
        puller: Puller,
        state: TurnState,
        request: UnifiedRequest,
        on_end: Callable[[bool], None] | None = None,
    ) -> None:
        self._puller = puller
        self._on_end = on_end
        self._state = state
        self._request = request
        self._end: EndOfTurn | None = None
        self._response: UnifiedResponse | None = None
        self._batch: Sequence[Any] = ()
        self._index = 0
        self._ended = False

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> Item:
        while self._index >= len(self._batch):
            await self._next_batch()
        item = self._batch[self._index]
        self._index += 1
        return item  # type: ignore[no-any-return]

    async def receive_batch(self) -> Sequence[Item]:
        """The items not yet taken, as they arrived: the rest of the current batch, or
        the next one (what one network read or one engine step produced). Raises
        ``StopAsyncIteration`` at the end, or the error that ended the turn.

        For layers above a turn that pass its items on (the tool loop): one call per
        batch rather than per item.
        """
        while self._index >= len(self._batch):
            await self._next_batch()
        batch = self._batch[self._index :] if self._index else self._batch
        self._batch, self._index = (), 0
        return batch

    async def ready(self) -> None:
        """Wait until the first item has arrived or the turn has ended, without taking
        anything: raises the error that ended the turn if it ended before any item.

        This is where a :class:`~cuca.FallbackClient` (and a pool) decides whether the
        turn was answered: after ``ready`` returns, the items are the caller's."""
        while not self._ended and self._index >= len(self._batch):
            try:
                await self._next_batch()
            except StopAsyncIteration:
                return

    async def _next_batch(self) -> None:
        """Receive the next batch, the turn's end taken out of it (a batch may then be
        empty); at the end, finish the turn and stop."""
        if self._ended:
            raise StopAsyncIteration
        try:
            batch = await self._puller.pull()
        except trio.EndOfChannel:
            self._ended = True
            self._batch, self._index = (), 0
            await self._finish()
            raise StopAsyncIteration from None
        self._batch, end = split_end(batch)
        if end is not None:
            self._end = end
        self._index = 0

    async def _finish(self) -> None:
        """The last stage is done, but an upstream one may still fail (a user stage that
        closed its output early): the turn ends when all have."""
        await self._state.finished.wait()
        self._report_end(cancelled=False)
        if self._state.error is not None:
            raise self._state.error from None
        if self._end is None:
            raise PluginError(
                "pipeline", "the turn ended without its EndOfTurn: a stage dropped it"
            )
        self._request = self._end.request
        self._response = self._end.response()

    def _report_end(self, cancelled: bool) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(cancelled)

    async def _close(self) -> None:
        """The consumer is done with the turn, at its end or before: close what the last
        stages hold open (the response), and report the turn cancelled if it had not
        ended."""
        try:
            await self._puller.aclose()
        finally:
            self._report_end(cancelled=self._end is None)

    @property
    def response(self) -> UnifiedResponse | None:
        """The turn's terminal record: usage, cache usage, finish reason. ``None`` until
        the stream has ended, and after a turn that ended in an error."""
        return self._response

    @property
    def request(self) -> UnifiedRequest:
        """The request as sent, after every plugin's ``on_request``, once the stream has
        ended cleanly; before that, the request as given to the client."""
        return self._request


@attrs.frozen
class Completion:
    """A whole turn, collected: the assistant message (deltas merged), the errors that
    did not end the turn, and the terminal response.

    ``parsed`` is the answer as a value when the request had an output schema (an
    instance of its class, or plain JSON for a schema given as a dict), else ``None``;
    an answer that does not fit is an ``OutputValidationError`` in ``errors`` instead,
    carrying the raw text.
    """

    message: UnifiedMessage
    errors: tuple[CucaError, ...]
    response: UnifiedResponse
    parsed: Any = None

    @property
    def text(self) -> str:
        return self.message.text()

    @property
    def blocks(self) -> tuple[Block, ...]:
        return self.message.content


def merge_blocks(blocks: Sequence[Block]) -> tuple[Block, ...]:
    """Merge adjacent Text deltas and adjacent Thinking deltas into whole blocks.

    A delta carrying provider data (a signature) keeps it on the merged block; a new
    signature (or reasoning item id) after one was already set starts a new block, so
    two signed blocks are never fused. Linear in the total text: each run of deltas is
    joined once.
    """
    out: list[Block] = []
    run: list[Block] = []
    for block in blocks:
        if run:
            last = run[-1]
            # the common case first: one more text delta (a call per item costs 10%)
            if type(block) is Text and type(last) is Text and last.signature is None:
                run.append(block)
                continue
            if _continues(last, block):
                run.append(block)
                continue
        if run:
            out.append(_merged(run))
        run = [block]
    if run:
        out.append(_merged(run))
    return tuple(out)


def _continues(last: Block, block: Block) -> bool:
    """Whether ``block`` extends the run whose last delta is ``last``."""
    if isinstance(block, Text):
        return isinstance(last, Text) and last.signature is None
    return (
        isinstance(block, Thinking)
        and isinstance(last, Thinking)
        and last.signature is None
        and last.id is None
        and not (last.redacted or block.redacted)
    )


def _merged(run: list[Block]) -> Block:
    """One block for a run of deltas: the text joined, the last delta's signature, and
    for Thinking the last provider any delta named."""
    last = run[-1]
    if len(run) == 1:
        return last
    if isinstance(last, Text):
        texts = cast(list[Text], run)
        return Text("".join([b.text for b in texts]), last.signature, last.provider)
    assert isinstance(last, Thinking)
    thoughts = [b for b in run if isinstance(b, Thinking)]
    provider = next((b.provider for b in reversed(thoughts) if b.provider is not None), None)
    return Thinking("".join(b.text for b in thoughts), last.signature, provider, id=last.id)


async def collect(stream: ResponseStream, schema: OutputSchema | None = None) -> Completion:
    """Read ``stream`` to its end: deltas merged into whole blocks, the errors that did
    not end the turn, the response (and the answer parsed against ``schema``)."""
    blocks: list[Block] = []
    errors: list[CucaError] = []
    async for item in stream:
        if isinstance(item, CucaError):
            errors.append(item)
        else:
            blocks.append(item)
    response = stream.response
    assert response is not None  # a clean end always sets it
    return completion(blocks, errors, response, schema)


def completion(
    blocks: Sequence[Block],
    errors: Sequence[CucaError],
    response: UnifiedResponse,
    schema: OutputSchema | None = None,
) -> Completion:
    message = UnifiedMessage(MessageRole.ASSISTANT, merge_blocks(blocks))
    if schema is None:
        return Completion(message, tuple(errors), response)
    from .schema import parse_output

    try:
        parsed = parse_output(schema, message.text())
    except OutputValidationError as exc:
        return Completion(message, (*errors, exc), response)
    return Completion(message, tuple(errors), response, parsed)
