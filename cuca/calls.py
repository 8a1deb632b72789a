"""The calls every turn client answers, written once over its one ``generate_stream``.

A :class:`~cuca.stream.TurnClient` runs a turn with ``generate_stream(request, *,
stages, retry, fused, headers)``. What a user calls besides is the same on every client
that is one (:class:`~cuca.CucaClient`, :class:`~cuca.FallbackClient`), so it is written
here, once, over that method: ``generate_stream_with_response`` (the stream and a handle
on its response), ``generate`` (a turn collected, its structured answer repaired up to
``repair`` times) and ``run_tools`` (the tool loop). They take the same arguments on
every client, and pass the turn's own options on to the one that answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Unpack

from ._block import TurnBlock
from .stream import Completion, PendingResponse, ResponseStream, collect
from .types import UnifiedRequest

if TYPE_CHECKING:
    from cuca.tools.loop import ToolLoopOptions, ToolLoopStream
    from cuca.tools.tool import Tool

    from .retry import RetryPolicy
    from .turn import Insertion

__all__ = ["TurnCalls"]


class TurnCalls(ABC):
    """A turn client's calls over its :meth:`generate_stream` (see the module)."""

    written: ClassVar[str] = "client"
    """How a user names the client in a call (``client``, ``fallback``): the error of
    an ``async for`` on a turn's block quotes the call to write instead."""

    @abstractmethod
    def generate_stream(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[ResponseStream]:
        """Stream one turn (an ``async with`` block): the client's own way to run it."""

    def generate_stream_with_response(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> TurnBlock[tuple[ResponseStream, PendingResponse]]:
        """Like :meth:`generate_stream`, also giving a handle on the response, which is
        filled once the stream has ended."""
        turn = self.generate_stream(
            request, stages=stages, retry=retry, fused=fused, headers=headers
        )
        written = f"{self.written}.generate_stream_with_response(request)"
        return TurnBlock(_with_response(turn), written)

    async def generate(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
        repair: int = 0,
    ) -> Completion:
        """Run one turn to its end and collect it: deltas merged into whole blocks, and
        the answer parsed when the request has an output schema.

        ``repair=N``: an answer that does not fit the output schema is sent back with
        its error quoted, up to N times (:mod:`cuca.repair`); ``attempts`` lists the
        tries and ``response`` sums their usage; after the last failure an
        :class:`~cuca.OutputValidationError` carrying every attempt is raised."""
        from .repair import repaired

        async def turn(request: UnifiedRequest) -> Completion:
            opened = self.generate_stream(
                request, stages=stages, retry=retry, fused=fused, headers=headers
            )
            async with opened as stream:
                return await collect(stream, request.output_schema)

        return await repaired(turn, request, repair)

    def run_tools(
        self,
        request: UnifiedRequest,
        tools: Sequence[Tool | Callable[..., Any]],
        **options: Unpack[ToolLoopOptions],
    ) -> TurnBlock[ToolLoopStream]:
        """Run ``request`` with ``tools`` until the model answers without a call (see
        :func:`cuca.tools.loop.run_tools` and docs/tools.md); each step is a turn of
        this client's::

            async with client.run_tools(request, tools=[get_weather], max_steps=4) as stream:
                async for item in stream:
                    ...
            stream.conversation, stream.usage
        """
        from cuca.tools.loop import run_tools

        written = f"{self.written}.run_tools(request, tools)"
        return TurnBlock(run_tools(self, request, tools, **options), written)


@asynccontextmanager
async def _with_response(
    turn: AbstractAsyncContextManager[ResponseStream],
) -> AsyncIterator[tuple[ResponseStream, PendingResponse]]:
    async with turn as stream:
        yield stream, PendingResponse(stream)
