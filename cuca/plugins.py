"""Plugins: hooks that see every request and every block of a turn.

Subclass :class:`CucaPlugin` and override the hooks you need; hooks run in registration
order. Error rules: an ``on_request`` error aborts the turn (raised as
:class:`~cuca.errors.PluginError`); an ``on_stream_chunk`` error is yielded as a
``PluginError`` item in place of the block, which is dropped, and the stream goes on; an
``on_response_complete`` error is yielded as a ``PluginError`` item at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .types import Block, UnifiedRequest, UnifiedResponse

if TYPE_CHECKING:
    from .observe import TurnObserver
    from .tool_loop import LoopObserver

__all__ = ["CucaPlugin"]


class CucaPlugin:
    """Base class of plugins; every hook defaults to doing nothing."""

    name: str = "plugin"
    observes_raw: bool = False
    """Whether this plugin's observers want the raw response bytes (``TurnObserver.raw``);
    the tap on the transport's output is only put in a turn when some plugin says so."""

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        """Return the request to send (possibly a changed copy). ``request.provider`` is
        already the client's provider."""
        return request

    async def on_stream_chunk(self, block: Block) -> Block | None:
        """Return the block to pass on, a replacement, or ``None`` to drop it."""
        return block

    async def on_response_complete(self, response: UnifiedResponse) -> None:
        """Called once when the turn ended cleanly, with its terminal record."""

    def observe(self, request: UnifiedRequest) -> TurnObserver | None:
        """Return a :class:`~cuca.observe.TurnObserver` to watch this turn from outside
        (raw bytes, every item, how it ended), or ``None``. Called once the request hooks
        have run; the session log and the trace plugin use it."""
        return None

    def observe_tools(self, request: UnifiedRequest) -> LoopObserver | None:
        """Return a :class:`~cuca.tool_loop.LoopObserver` to watch a tool loop run on the
        client (its steps and tool calls), or ``None``. Called when the loop starts, with
        its request (tools declared); the trace plugin uses it."""
        return None


def overrides(plugin: CucaPlugin, hook: str) -> bool:
    """Whether ``plugin`` implements ``hook`` itself (so no-op hooks cost nothing)."""
    return getattr(type(plugin), hook) is not getattr(CucaPlugin, hook)
