"""The two plugin stages: request hooks at the start of a turn, chunk hooks at the end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from cuca.errors import CucaError, PluginError
from cuca.plugins import CucaPlugin, overrides
from cuca.types import UnifiedRequest, UnifiedResponse

from .context import Stage, TurnContext

__all__ = ["chunk_hooks_stage", "request_hooks_stage"]


def _plugin_error(plugin: CucaPlugin, hook: str, exc: Exception) -> PluginError:
    return PluginError(plugin.name, f"{hook} failed: {type(exc).__name__}: {exc}")


def request_hooks_stage(plugins: Sequence[CucaPlugin], ctx: TurnContext) -> Stage:
    """Run every plugin's ``on_request`` in order; an error aborts the turn."""
    hooked = [p for p in plugins if overrides(p, "on_request")]

    async def request_hooks(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            for request in batch:
                for plugin in hooked:
                    try:
                        request = await plugin.on_request(request)
                    except Exception as exc:
                        raise _plugin_error(plugin, "on_request", exc) from exc
                    if not isinstance(request, UnifiedRequest):
                        raise PluginError(plugin.name, "on_request must return a request")
                ctx.request = request
                await send.send([request])

    return request_hooks


def chunk_hooks_stage(plugins: Sequence[CucaPlugin], ctx: TurnContext) -> Stage:
    """Run every plugin's ``on_stream_chunk`` on each block, then, once the turn ended
    cleanly, build its :class:`UnifiedResponse` and call ``on_response_complete``."""
    chunk_hooked = [p for p in plugins if overrides(p, "on_stream_chunk")]
    done_hooked = [p for p in plugins if overrides(p, "on_response_complete")]

    async def run_hooks(item: Any, out: list[Any]) -> None:
        for plugin in chunk_hooked:
            try:
                item = await plugin.on_stream_chunk(item)
            except Exception as exc:
                out.append(_plugin_error(plugin, "on_stream_chunk", exc))
                return
            if item is None:
                return
        out.append(item)

    async def chunk_hooks(
        receive: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any]
    ) -> None:
        async for batch in receive:
            if chunk_hooked:
                out: list[Any] = []
                for item in batch:
                    if isinstance(item, CucaError):
                        out.append(item)
                    else:
                        await run_hooks(item, out)
                batch = out
            if batch:
                await send.send(batch)
        if ctx.error is not None:
            return
        response = _response(ctx)
        ctx.response = response
        tail: list[Any] = []
        for plugin in done_hooked:
            try:
                await plugin.on_response_complete(response)
            except Exception as exc:
                tail.append(_plugin_error(plugin, "on_response_complete", exc))
        if tail:
            await send.send(tail)

    return chunk_hooks


def _response(ctx: TurnContext) -> UnifiedResponse:
    summary = ctx.summary
    request = ctx.request
    if summary is None:
        return UnifiedResponse(provider=request.provider, model=request.model)
    return UnifiedResponse(
        provider=request.provider,
        model=request.model,
        usage=summary.usage,
        prompt_cache_usage=summary.prompt_cache_usage,
        finish_reason=summary.finish_reason,
        counted_usage=summary.counted_usage,
    )
