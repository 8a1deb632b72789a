"""The chunk hooks, the plugin stage at the end of a turn.

It only runs hooks; with no plugin that overrides them, it passes items on at no cost.
The request hooks are no stage: they run at the turn's *before* seam, where I/O is
allowed (:mod:`cuca.seams`), and the ``request_hooks`` point passes their request on.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from cuca.errors import CucaError, PluginError
from cuca.plugins import CucaPlugin, overrides
from cuca.turn import EndOfTurn, Item
from cuca.types import Block

from .stage import PASS, Transform, Transformer

__all__ = ["ChunkHooks", "chunk_hooks_stage"]


class ChunkHooks(Transformer[Item | EndOfTurn, Item | EndOfTurn]):
    """The ``chunk_hooks`` point: every plugin's ``on_stream_chunk`` on each block, in
    order; at the :class:`EndOfTurn`, ``on_response_complete`` with the turn's response.
    A hook that raises is reported as a :class:`PluginError` item in place of its
    block."""

    def __init__(
        self, chunk_hooked: Sequence[CucaPlugin], done_hooked: Sequence[CucaPlugin]
    ) -> None:
        self.chunk_hooked = chunk_hooked
        self.done_hooked = done_hooked

    async def feed(self, batch: Sequence[Item | EndOfTurn], /) -> list[Item | EndOfTurn]:
        out: list[Item | EndOfTurn] = []
        for item in batch:
            if isinstance(item, EndOfTurn):
                await self._complete(item, out)
            elif isinstance(item, CucaError) or not self.chunk_hooked:
                out.append(item)
            else:
                await self._run_hooks(item, out)
        return out

    async def _run_hooks(self, item: Block, out: list[Item | EndOfTurn]) -> None:
        block: Block | None = item
        for plugin in self.chunk_hooked:
            try:
                block = await plugin.on_stream_chunk(item)
            except Exception as exc:
                out.append(PluginError.hook_failed(plugin.name, "on_stream_chunk", exc))
                return
            if block is None:
                return
            item = block
        out.append(item)

    async def _complete(self, end: EndOfTurn, out: list[Item | EndOfTurn]) -> None:
        response = end.response()
        for plugin in self.done_hooked:
            try:
                await plugin.on_response_complete(response)
            except Exception as exc:
                out.append(PluginError.hook_failed(plugin.name, "on_response_complete", exc))
        out.append(end)


def chunk_hooks_stage(
    plugins: Sequence[CucaPlugin],
) -> Transform[Item | EndOfTurn, Item | EndOfTurn]:
    """The ``chunk_hooks`` point for ``plugins`` (:class:`ChunkHooks`); with no plugin
    that overrides those hooks, a point with nothing to do (:data:`PASS`)."""
    chunk_hooked = [p for p in plugins if overrides(p, "on_stream_chunk")]
    done_hooked = [p for p in plugins if overrides(p, "on_response_complete")]
    if not chunk_hooked and not done_hooked:
        return PASS
    return Transform(partial(ChunkHooks, chunk_hooked, done_hooked))
