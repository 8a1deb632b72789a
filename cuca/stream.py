"""The consumer's side of a turn: an async iterator of items, then a response."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .errors import CucaError, OutputValidationError
from .types import (
    Block,
    MessageRole,
    OutputSchema,
    Text,
    Thinking,
    UnifiedMessage,
    UnifiedResponse,
)

if TYPE_CHECKING:
    from cuca.stages.context import TurnContext

__all__ = ["Completion", "ResponseStream", "merge_blocks"]

Item = Block | CucaError


class ResponseStream:
    """The items of one turn, one at a time: blocks, and ``CucaError`` instances for
    errors that did not end the turn. An error that ended the turn is raised from the
    iteration after every item produced before it. ``response`` is set once the stream
    has ended cleanly."""

    def __init__(self, receive: trio.MemoryReceiveChannel[Sequence[Any]], ctx: TurnContext):
        self._receive = receive
        self._ctx = ctx
        self._batch: Sequence[Any] = ()
        self._index = 0
        self._ended = False

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> Item:
        while self._index >= len(self._batch):
            if self._ended:
                raise StopAsyncIteration
            try:
                self._batch = await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                self._ended = True
                self._batch, self._index = (), 0
                # the last stage is done, but an upstream one may still fail (a user
                # stage that closed its output early): the turn ends when all have
                await self._ctx.finished.wait()
                if self._ctx.error is not None:
                    raise self._ctx.error from None
                raise StopAsyncIteration from None
            self._index = 0
        item: Item = self._batch[self._index]
        self._index += 1
        return item

    @property
    def response(self) -> UnifiedResponse | None:
        """The turn's terminal record: usage, cache usage, finish reason. ``None`` until
        the stream has ended, and after a turn that ended in an error."""
        return None if self._ctx.error is not None else self._ctx.response

    @property
    def request(self) -> Any:
        """The request as sent, after every plugin's ``on_request``."""
        return self._ctx.request


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
