"""The consumer's side of a turn: an async iterator of items, then a response."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from .assemble import BlockAssembler, merge_blocks
from .errors import ConfigurationError, CucaError, OutputValidationError, PluginError
from .turn import EndOfTurn, Item, TurnState, split_end
from .types import (
    Block,
    FinishReason,
    OutputSchema,
    TokenUsage,
    ToolCall,
    UnifiedMessage,
    UnifiedRequest,
    UnifiedResponse,
)

if TYPE_CHECKING:
    from cuca.partial import Partials
    from cuca.stages.runner import Puller

    from .retry import RetryPolicy
    from .turn import Insertion

__all__ = [
    "Attempt",
    "Completion",
    "PendingResponse",
    "ResponseStream",
    "TurnClient",
    "merge_blocks",
]


class ResponseStream:
    """The items of one turn, one at a time: blocks, and ``CucaError`` instances for
    errors that did not end the turn. An error that ended the turn is raised from the
    iteration after every item produced before it. ``response`` is set once the stream
    has ended cleanly, from the turn's :class:`~cuca.turn.EndOfTurn`.

    The stream pulls its batches from the turn's :class:`~cuca.stages.runner.Puller`: in
    a fused turn, the last stages run in the task that iterates it. ``on_end(cancelled)`` is
    awaited once, when the turn has ended, before the consumer sees the end (or when it
    left early: the client then calls ``_close``); ``response`` is set by then when the
    turn ended cleanly (the turn's *after* seam: its gates settled, then its observers
    told). ``on_items(items, end)`` sees every batch as the consumer receives it (the
    turn's observers, :mod:`cuca.seams`); one that raises ends the turn with its error.
    """

    def __init__(
        self,
        puller: Puller,
        state: TurnState,
        request: UnifiedRequest,
        on_end: Callable[[bool], Awaitable[None]] | None = None,
        on_items: Callable[[Sequence[Item], EndOfTurn | None], None] | None = None,
    ) -> None:
        self._puller = puller
        self._on_end = on_end
        self._on_items = on_items
        self._state = state
        self._request = request
        self._end: EndOfTurn | None = None
        self._response: UnifiedResponse | None = None
        self._batch: Sequence[Any] = ()
        self._index = 0
        self._ended = False
        self._assembler = BlockAssembler()  # the message, batch by batch

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
        if self._on_items is not None:
            try:
                self._on_items(self._batch, end)
            except Exception as exc:  # an observer failed: the turn ends with its error
                self._state.fail(exc)
                self._batch = ()
                await self._puller.aclose()
                return
        self._assembler.feed(self._batch)

    async def _finish(self) -> None:
        """The last stage is done, but an upstream one may still fail (a user stage that
        closed its output early): the turn ends when all have."""
        await self._state.finished.wait()
        end = self._end
        if self._state.error is None and end is not None:
            self._request, self._response = end.request, end.response()
        await self._report_end(cancelled=False)
        if self._state.error is not None:  # a turn that failed, or whose observer did
            self._response = None
            raise self._state.error from None
        if end is None:
            raise PluginError(
                "pipeline", "the turn ended without its EndOfTurn: a stage dropped it"
            )

    async def _report_end(self, cancelled: bool) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            await on_end(cancelled)

    async def _close(self) -> None:
        """The consumer is done with the turn, at its end or before: close what the last
        stages hold open (the response), and report the turn cancelled if it had not
        ended."""
        try:
            await self._puller.aclose()
        finally:
            await self._report_end(cancelled=self._end is None)

    @property
    def response(self) -> UnifiedResponse | None:
        """The turn's terminal record: usage, cache usage, finish reason. ``None`` until
        the stream has ended, and after a turn that ended in an error."""
        return self._response

    def partial(self) -> Partials:
        """The answer parsed so far, as it arrives, for a request with an output schema:
        an async iterator over this same stream (its items are consumed) that yields a
        dict (for a class, a :class:`~cuca.partial.PartialObject`) each time a block
        completes a value, then the parsed answer (``Completion.parsed``) when it fits.
        See :mod:`cuca.partial`."""
        from .partial import Partials

        schema = self._request.output_schema
        if schema is None:
            raise ConfigurationError("stream.partial() needs a request with an output schema")
        return Partials(self, schema)

    @property
    def message(self) -> UnifiedMessage:
        """The assistant message of the turn, deltas merged (:func:`merge_blocks`), once
        the stream has ended cleanly: the same message ``generate`` returns, ready for
        the next turn (``request.add_message(stream.message)``). A
        ``ConfigurationError`` before that, or after a turn that ended in an error."""
        if self._response is None:
            raise ConfigurationError(
                "stream.message is set once the stream has ended cleanly: read the "
                "stream to its end inside the async with block first"
            )
        return self._assembler.message()

    @property
    def request(self) -> UnifiedRequest:
        """The request as sent, after every plugin's ``on_request``, once the stream has
        ended cleanly; before that, the request as given to the client."""
        return self._request


class PendingResponse:
    """The :class:`UnifiedResponse` of a turn that is still streaming, read once it has
    ended: ``value`` is ``None`` until the stream has ended cleanly. Not a future that can
    be awaited: the response exists only once the stream has been read to its end, in
    the task that reads it."""

    def __init__(self, stream: ResponseStream) -> None:
        self._stream = stream

    @property
    def value(self) -> UnifiedResponse | None:
        """The response once the stream has ended cleanly, else ``None``."""
        return self._stream.response


class TurnClient(Protocol):
    """What runs one turn: a :class:`~cuca.CucaClient`, a :class:`~cuca.FallbackClient`,
    a pool's member. The services (a pool, fallback, the tool loop) wrap one and are one:
    ``generate_stream`` takes the same arguments on each (the turn's own ``stages``,
    ``retry``, ``fused`` and ``headers``, passed on to the client that answers). The
    calls a user makes besides (``generate_stream_with_response``, ``generate`` with
    ``repair``, ``run_tools``) are written once over it, in :class:`cuca.calls.TurnCalls`,
    which the clients inherit: the same arguments on every one."""

    def generate_stream(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[ResponseStream]: ...


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
    attempts: tuple[Attempt, ...] = ()
    """With ``generate(request, repair=N)`` (N >= 1): every try, in order, the last the one
    that fit (its ``error`` ``None``; a single attempt when the first try fits), and
    ``response`` sums the usage of all of them; with ``repair=0``, empty."""

    @property
    def text(self) -> str:
        return self.message.text()

    @property
    def blocks(self) -> tuple[Block, ...]:
        return self.message.content

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls of the message, in order (empty when the model called none)."""
        return tuple(block for block in self.message.content if isinstance(block, ToolCall))

    @property
    def usage(self) -> TokenUsage | None:
        """The turn's token usage (``response.usage``), ``None`` when the backend gave none."""
        return self.response.usage

    @property
    def finish_reason(self) -> FinishReason | None:
        """Why the turn ended (``response.finish_reason``), the same on every backend:
        ``FinishReason.STOP``, ``LENGTH``, ``TOOL_CALLS``... (the backend's own word is
        ``response.provider_finish_reason``)."""
        return self.response.finish_reason


@attrs.frozen
class Attempt:
    """One try at a structured answer: the assistant ``message``, the
    :class:`~cuca.OutputValidationError` it failed with (``None`` for the one that
    fit), and its turn's ``response`` (its own ``usage``)."""

    message: UnifiedMessage
    error: OutputValidationError | None
    response: UnifiedResponse

    @property
    def usage(self) -> TokenUsage | None:
        return self.response.usage


async def collect(stream: ResponseStream, schema: OutputSchema | None = None) -> Completion:
    """Read ``stream`` to its end: deltas merged into whole blocks, the errors that did
    not end the turn, the response (and the answer parsed against ``schema``)."""
    errors: list[CucaError] = []
    while True:  # a batch at a time: the stream assembles the message itself
        try:
            batch = await stream.receive_batch()
        except StopAsyncIteration:
            break
        errors += [item for item in batch if isinstance(item, CucaError)]
    response = stream.response
    assert response is not None  # a clean end always sets it
    return completion(stream.message, errors, response, schema)


def completion(
    message: UnifiedMessage,
    errors: Sequence[CucaError],
    response: UnifiedResponse,
    schema: OutputSchema | None,
) -> Completion:
    """The :class:`Completion` of a finished turn (``message`` already merged), the
    answer parsed against ``schema`` when there is one."""
    if schema is None:
        return Completion(message, tuple(errors), response)
    from .schema import parse_output

    try:
        parsed = parse_output(schema, message.text())
    except OutputValidationError as exc:
        return Completion(message, (*errors, exc), response)
    return Completion(message, tuple(errors), response, parsed)
