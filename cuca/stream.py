"""The consumer's side of a turn: an async iterator of items, then a response."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import attrs
import trio

from .errors import CucaError, OutputValidationError, PluginError
from .turn import EndOfTurn, TurnState
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

__all__ = ["Completion", "ResponseStream", "merge_blocks"]

Item: TypeAlias = Block | CucaError
"""What a stream yields: a block, or an error that did not end the turn."""


class ResponseStream:
    """The items of one turn, one at a time: blocks, and ``CucaError`` instances for
    errors that did not end the turn. An error that ended the turn is raised from the
    iteration after every item produced before it. ``response`` is set once the stream
    has ended cleanly, from the turn's :class:`~cuca.turn.EndOfTurn`."""

    def __init__(
        self,
        receive: trio.MemoryReceiveChannel[Sequence[Any]],
        state: TurnState,
        request: UnifiedRequest,
    ) -> None:
        self._receive = receive
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
        while True:
            while self._index >= len(self._batch):
                if self._ended:
                    raise StopAsyncIteration
                try:
                    self._batch = await self._receive.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    self._ended = True
                    self._batch, self._index = (), 0
                    await self._finish()
                    raise StopAsyncIteration from None
                self._index = 0
            item = self._batch[self._index]
            self._index += 1
            if type(item) is not EndOfTurn:
                return item  # type: ignore[no-any-return]
            self._end = item

    async def _finish(self) -> None:
        """The last stage is done, but an upstream one may still fail (a user stage that
        closed its output early): the turn ends when all have."""
        await self._state.finished.wait()
        if self._state.error is not None:
            raise self._state.error from None
        if self._end is None:
            raise PluginError(
                "pipeline", "the turn ended without its EndOfTurn: a stage dropped it"
            )
        self._request = self._end.request
        self._response = self._end.response()

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
    two signed blocks are never fused.
    """
    out: list[Block] = []
    for block in blocks:
        last = out[-1] if out else None
        if isinstance(block, Text) and isinstance(last, Text) and last.signature is None:
            out[-1] = Text(last.text + block.text, block.signature, block.provider)
        elif (
            isinstance(block, Thinking)
            and isinstance(last, Thinking)
            and last.signature is None
            and last.id is None
            and not (last.redacted or block.redacted)
        ):
            provider = block.provider or last.provider
            out[-1] = Thinking(last.text + block.text, block.signature, provider, id=block.id)
        else:
            out.append(block)
    return tuple(out)


def completion(
    blocks: Sequence[Block],
    errors: Sequence[CucaError],
    response: UnifiedResponse,
    schema: OutputSchema | None = None,
) -> Completion:
    message = UnifiedMessage(MessageRole.ASSISTANT, merge_blocks(blocks))
    if schema is None:
        return Completion(message, tuple(errors), response)
    from .structured import parse_output

    try:
        parsed = parse_output(schema, message.text())
    except OutputValidationError as exc:
        return Completion(message, (*errors, exc), response)
    return Completion(message, tuple(errors), response, parsed)
