"""The two plugin stages: request hooks at the start of a turn, chunk hooks at the end.

Both only run hooks; with no plugin that overrides their hooks, they pass items on at
no cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cuca.errors import ContextOverflowError, CucaError, PluginError
from cuca.plugins import CucaPlugin, overrides
from cuca.turn import EndOfTurn
from cuca.types import UnifiedRequest

from .stage import PASS, Transform, Transformer

__all__ = ["chunk_hooks_stage", "request_hooks_stage"]


def request_hooks_stage(plugins: Sequence[CucaPlugin]) -> Transform[UnifiedRequest, UnifiedRequest]:
    """Run every plugin's ``on_request`` in order; an error aborts the turn."""
    hooked = [p for p in plugins if overrides(p, "on_request")]
    if not hooked:
        return PASS

    class RequestHooks(Transformer[UnifiedRequest, UnifiedRequest]):
        async def feed(self, batch: Sequence[UnifiedRequest], /) -> list[UnifiedRequest]:
            out: list[UnifiedRequest] = []
            for request in batch:
                for plugin in hooked:
                    try:
                        request = await plugin.on_request(request)
                    except ContextOverflowError:
                        raise  # a compactor that could not fit the request: the turn's error
                    except Exception as exc:
                        raise PluginError.hook_failed(plugin.name, "on_request", exc) from exc
                    if not isinstance(request, UnifiedRequest):
                        raise PluginError(plugin.name, "on_request must return a request")
                out.append(request)
            return out

    return Transform(RequestHooks)


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
