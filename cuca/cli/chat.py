"""``cuca chat``: resolve the settings, load the local model if needed, then run one
turn or an interactive session.

Everything blocking happens off the trio thread: the model loads in a worker thread
(:mod:`cuca.cli.progress`), the session reads lines in one. Every ``CucaError``
ends as one line on stderr and an exit status (:func:`cuca.cli.turn.exit_status`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import attrs
import trio

from cuca.client import CucaClient
from cuca.errors import ConfigurationError, CucaError
from cuca.plugins import CucaPlugin
from cuca.retry import RetryPolicy
from cuca.types import ProviderEndpoint, UnifiedRequest

from .config import EXIT_INTERRUPTED, EXIT_OK, ChatSettings, CliError, resolve_chat
from .console import Console
from .history import line_editing
from .jsonl import JsonRenderer
from .progress import load_with_progress
from .render import Renderer, TextRenderer
from .session import Session, line_reader
from .turn import exit_status, interruptible, loop_turn, stream_turn

if TYPE_CHECKING:
    from cuca.engine import LocalModel
    from cuca.tools import Tool

__all__ = ["first_request", "make_client", "mcp_tools", "run_chat"]

DEFAULT_CTX = 4096


def first_request(settings: ChatSettings) -> UnifiedRequest:
    """The request every turn starts from: model, system message and sampling flags."""
    request = UnifiedRequest.new(settings.model)
    if settings.system:
        request = request.add_system_message(settings.system)
    return (
        request.set_max_tokens(settings.max_tokens)
        .set_temperature(settings.temperature)
        .set_thinking(settings.thinking)
    )


def make_client(settings: ChatSettings, model: LocalModel | None = None) -> CucaClient:
    """A client for the resolved provider (``model`` for the local one)."""
    config: Any = None
    if settings.provider == ProviderEndpoint.LLAMA_CPP:
        from cuca.providers.llamacpp.encode import LlamaCppConfig, LlamaRoute

        route = LlamaRoute(settings.route or LlamaRoute.CHAT.value)
        config = LlamaCppConfig(route=route, n_threads=settings.threads)
    retry = None if settings.retries is None else RetryPolicy(max_retries=settings.retries)
    plugins: list[CucaPlugin] = []
    if settings.log is not None:
        from cuca.observers.session_log import SessionLog

        plugins.append(SessionLog(settings.log))
    return CucaClient(
        settings.provider,
        plugins=plugins,
        base_url=settings.base_url,
        api_key=settings.api_key,
        provider_config=config,
        local_model=model,
        timeout=settings.timeout,
        retry=retry,
    )


def _load_model(settings: ChatSettings) -> LocalModel:
    """Load the local model (blocking; runs in a worker thread)."""
    from cuca.engine import LocalModel

    assert settings.model_path is not None  # resolve_chat sets it for the local provider
    template = None
    if settings.chat_template_file is not None:
        path = settings.chat_template_file
        try:
            template = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read chat template {path}: {exc}") from None
    return LocalModel.load(
        settings.model_path,
        n_ctx=settings.ctx or DEFAULT_CTX,
        n_threads=settings.threads,
        chat_template=template,
        exact_reuse=not settings.fast,
        flash_attention=settings.fast,
    )


@asynccontextmanager
async def mcp_tools(settings: ChatSettings) -> AsyncIterator[list[Tool]]:
    """The tools of every ``--mcp`` and ``--mcp-http`` server, their sessions open for
    the block (none: no tools, and nothing imported)."""
    if not settings.mcp and not settings.mcp_http:
        yield []
        return
    try:
        from cuca.mcp import McpServer
    except ImportError as exc:
        raise CliError(f"--mcp needs the mcp extra: pip install 'cuca[mcp]' ({exc})") from None
    tools: list[Tool] = []
    async with AsyncExitStack() as stack:
        for command, *args in settings.mcp:
            server = await stack.enter_async_context(McpServer.stdio(command, args))
            tools += await server.tools()
        for url in settings.mcp_http:
            server = await stack.enter_async_context(McpServer.http(url))
            tools += await server.tools()
        yield tools


async def _run_once(
    client: CucaClient, request: UnifiedRequest, renderer: Renderer, tools: list[Tool]
) -> int:
    def work() -> Awaitable[object]:
        if tools:
            return loop_turn(client, request, tools, renderer)
        return stream_turn(client, request, renderer)

    try:
        _, interrupted = await interruptible(work)
    except CucaError as error:
        renderer.failed(error)
        return exit_status(error)
    if interrupted:
        renderer.interrupted()
        return EXIT_INTERRUPTED
    return EXIT_OK


async def chat(settings: ChatSettings, console: Console, stdin_tty: bool = False) -> int:
    """Run ``cuca chat`` with resolved ``settings``; returns the exit status."""
    renderer: Renderer = JsonRenderer(console) if settings.json else TextRenderer(console)
    model: LocalModel | None = None
    try:
        if settings.model_path is not None:
            path = settings.model_path
            model = await load_with_progress(lambda: _load_model(settings), path.name, console)
        async with make_client(settings, model) as client, mcp_tools(settings) as tools:
            try:
                request = first_request(settings)
                if not settings.interactive:
                    assert settings.prompt is not None
                    first = request.add_user_message(settings.prompt)
                    return await _run_once(client, first, renderer, tools)
                echo = not stdin_tty and not settings.json  # a piped session shows its prompts
                session = Session(client, request, renderer, console, tools, echo)
                read = line_reader(console, sys.stdin, stdin_tty)
                editing = stdin_tty and console.out_tty  # input() reads the lines then
                with line_editing(settings.history) if editing else nullcontext():
                    return await session.run(settings.prompt, read, stdin_tty)
            finally:  # the session log writes what it has queued before the command ends
                for plugin in client.plugins:
                    close = getattr(plugin, "close", None)
                    if callable(close):
                        await trio.to_thread.run_sync(close)
    except CucaError as error:  # before the first turn: loading, building the adapter
        renderer.failed(error)
        return exit_status(error)
    finally:
        if model is not None:
            model.close()


def _read_prompt() -> str:
    prompt = sys.stdin.read().strip()
    if not prompt:
        raise CliError("no prompt: pass one as an argument, on stdin, or use --interactive")
    return prompt


def run_chat(args: argparse.Namespace, env: Mapping[str, str], console: Console) -> int:
    """``cuca chat``, from parsed flags to exit status."""
    stdin_tty = sys.stdin is not None and sys.stdin.isatty()
    try:
        settings = resolve_chat(args, env, stdin_tty)
        first_request(settings)  # every flag checked before a model loads
    except ConfigurationError as error:  # a bad value, the default model's package missing
        raise CliError(str(error).removeprefix("configuration error: ")) from None
    if not settings.interactive:
        if settings.prompt is None:
            settings = attrs.evolve(settings, prompt=_read_prompt())
        elif not settings.prompt.strip():
            raise CliError("the prompt is empty")
    return trio.run(chat, settings, console, stdin_tty)
