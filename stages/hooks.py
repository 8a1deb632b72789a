"""The chunk hooks, the plugin stage at the end of a turn.

It only runs hooks; with no plugin that overrides them, it passes items on at no cost.
The request hooks are no stage: they run at the turn's *before* seam, where I/O is
allowed (:mod:`cuca.seams`), and the ``request_hooks`` point passes their request on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cuca.errors import CucaError, PluginError
from cuca.plugins import CucaPlugin, overrides
from cuca.turn import EndOfTurn

from .stage import PASS, Transform, Transformer

__all__ = ["chunk_hooks_stage"]


def chunk_hooks_stage(plugins: Sequence[CucaPlugin]) -> Transform[Any, Any]:
    """Run every plugin's ``on_stream_chunk`` on each block; at the :class:`EndOfTurn`,
    call ``on_response_complete`` with the turn's response. A hook that raises is
    reported as a :class:`PluginError` item in place of its block."""
    chunk_hooked = [p for p in plugins if overrides(p, "on_stream_chunk")]
    done_hooked = [p for p in plugins if overrides(p, "on_response_complete")]
    if not chunk_hooked and not done_hooked:
        return PASS

    async def run_hooks(item: Any, out: list[Any]) -> None:
        for plugin in chunk_hooked:
            try:
                item = await plugin.on_stream_chunk(item)
            except Exception as exc:
                out.append(PluginError.hook_failed(plugin.name, "on_stream_chunk", exc))
                return
            if item is None:
                return
        out.append(item)

    async def complete(end: EndOfTurn, out: list[Any]) -> None:
        response = end.response()
        for plugin in done_hooked:
            try:
                await plugin.on_response_complete(response)
            except Exception as exc:
                out.append(PluginError.hook_failed(plugin.name, "on_response_complete", exc))
        out.append(end)

    class ChunkHooks(Transformer[Any, Any]):
        async def feed(self, batch: Sequence[Any], /) -> list[Any]:
            out: list[Any] = []
            for item in batch:
                if isinstance(item, EndOfTurn):
                    await complete(item, out)
                elif isinstance(item, CucaError) or not chunk_hooked:
                    out.append(item)
                else:
                    await run_hooks(item, out)
            return out

    return Transform(ChunkHooks)
