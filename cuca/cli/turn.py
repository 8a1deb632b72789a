"""One turn of ``cuca chat``: stream it to a renderer, and let Ctrl-C stop it cleanly.

Ctrl-C during a turn does not raise ``KeyboardInterrupt`` in the middle of the
stream: a SIGINT receiver cancels the turn's scope instead, so ``generate_stream``
drops the stream through ordinary trio cancellation (the HTTP response is closed,
the local engine stops before its next token and keeps its cache), and the command
decides what happens next.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import attrs
import trio

from cuca.client import CucaClient
from cuca.errors import ConfigurationError, CucaError
from cuca.types import Block, UnifiedRequest, UnifiedResponse

from .config import EXIT_ERROR, EXIT_USAGE
from .render import Renderer
from .tasks import run_beside

if TYPE_CHECKING:
    from cuca.tools import Tool
    from cuca.tools.loop import ToolLoopStream

__all__ = ["exit_status", "interruptible", "loop_turn", "stream_turn"]

T = TypeVar("T")


def exit_status(error: CucaError) -> int:
    """2 for what the user can fix in flags or files, 1 for failures at run time."""
    return EXIT_USAGE if isinstance(error, ConfigurationError) else EXIT_ERROR


async def stream_turn(
    client: CucaClient, request: UnifiedRequest, renderer: Renderer
) -> list[Block]:
    """Stream ``request``, showing every item; return the turn's blocks (deltas, in
    order). An error that ends the turn is raised after the items before it."""
    renderer.begin()
    blocks: list[Block] = []
    async with client.generate_stream(request) as stream:
        while True:
            try:
                batch = await stream.receive_batch()
            except StopAsyncIteration:
                break
            if batch:
                renderer.arrived()
            for item in batch:
                renderer.item(item)
                if not isinstance(item, CucaError):
                    blocks.append(item)
    renderer.end(stream.response)
    return blocks


async def loop_turn(
    client: CucaClient, request: UnifiedRequest, tools: Sequence[Tool], renderer: Renderer
) -> UnifiedRequest:
    """Run the tool loop on ``request``, showing every item (each call and each result
    on a line of its own); return the conversation with every step appended. The usage
    shown is summed over the steps."""
    from cuca.tools.loop import Step

    renderer.begin()
    async with client.run_tools(request, tools) as stream:
        while True:
            try:
                batch = await stream.receive_batch()
            except StopAsyncIteration:
                break
            shown = [item for item in batch if not isinstance(item, Step)]
            if shown:
                renderer.arrived()
            for item in shown:
                renderer.item(item)
    renderer.end(_summed(stream))
    return stream.conversation


def _summed(stream: ToolLoopStream) -> UnifiedResponse | None:
    """The last step's response with the usage of every step."""
    if not stream.responses:
        return None
    return attrs.evolve(
        stream.responses[-1], usage=stream.usage, prompt_cache_usage=stream.prompt_cache_usage
    )


async def interruptible(work: Callable[[], Awaitable[T]]) -> tuple[T | None, bool]:
    """Run ``work()``; Ctrl-C cancels it. Returns ``(result, False)``, or
    ``(None, True)`` when interrupted. Errors of ``work`` propagate unchanged.

    Outside the main thread (where signals cannot be caught) Ctrl-C is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return await work(), False
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        with trio.CancelScope() as scope:

            async def watch() -> None:
                async for _ in signals:
                    scope.cancel()
                    return

            return await run_beside(work, watch), False
    return None, True
