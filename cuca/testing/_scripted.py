"""Scripted replies: the turns a model would give, written as cuca blocks, served on
loopback in any wire's exact framing, so that a test runs the whole real pipeline
(encoder, HTTP, SSE, decoder, the tool loop) without a hand-written stream.

The frames come from the same encoders ``cuca serve`` answers with (each wire's
``outbound.py`` in ``providers/``), so what a script says is what a real server of
that wire would have sent: text and thinking deltas, signatures where the wire carries
them, whole tool calls, usage, the finish reason, an error inside the stream or an
error status before it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from cuca.errors import ConfigurationError, http_status_error
from cuca.types import (
    Block,
    PromptCacheUsage,
    ProviderEndpoint,
    Text,
    TokenUsage,
)

from ._replay import ReplayServer, open_replay_server
from ._reply import RecordedRequest, Reply

if TYPE_CHECKING:
    from cuca.client import CucaClient

__all__ = [
    "WIRES",
    "Script",
    "ScriptExhausted",
    "ScriptedError",
    "ScriptedServer",
    "ScriptedTurn",
    "Wire",
    "open_scripted_server",
]

Wire: TypeAlias = Literal["chat", "responses", "anthropic", "gemini", "llamacpp"]
"""The wires a script can be served in, named as their folders in ``providers/``:
``chat`` (``/chat/completions``), ``responses`` (``/responses``), ``anthropic``
(``/messages``), ``gemini`` (``streamGenerateContent``) and ``llamacpp`` (llama.cpp's
native ``/completion``, text only)."""

WIRES: tuple[Wire, ...] = ("chat", "responses", "anthropic", "gemini", "llamacpp")

_JSON = (("content-type", "application/json"),)
_SSE = (("content-type", "text/event-stream"),)


@attrs.frozen
class ScriptedError:
    """An error a scripted turn answers with: ``status`` and ``message`` in the wire's
    error body. On its own in a script, the answer to that request is the error status
    (before any byte of a stream); as a :class:`ScriptedTurn`'s ``error``, the turn's
    blocks stream first and the error ends the stream, as a server that failed mid-way
    writes it."""

    status: int = 500
    message: str = "scripted error"

    def exception(self) -> Exception:
        """The error as the encoders take it (its kind follows ``status``)."""
        return http_status_error(self.status, self.message, self.message)


def _blocks(value: Any) -> tuple[Block, ...]:
    """Blocks as written in a script: a block, a string (a Text), or a sequence of them."""
    items = [value] if isinstance(value, str | Block) else list(value)
    blocks = tuple(Text(item) if isinstance(item, str) else item for item in items)
    for block in blocks:
        if not isinstance(block, Block):
            raise ConfigurationError(
                f"a scripted turn holds blocks (Text, Thinking, ToolCall...) or strings, "
                f"not {type(block).__name__}"
            )
    return blocks


@attrs.frozen
class ScriptedTurn:
    """One turn of a script: the ``blocks`` the model gives, in order (a string is a
    :class:`~cuca.Text`), then how the turn ends: its ``usage`` and
    ``prompt_cache_usage`` (``None``: the wire's zeros), its ``finish_reason`` (``None``:
    ``tool_calls`` when a call was written, else ``stop``; ``"length"`` for a cut), or an
    ``error`` that ends the stream after the blocks."""

    blocks: tuple[Block, ...] = attrs.field(converter=_blocks, default=())
    usage: TokenUsage | None = None
    prompt_cache_usage: PromptCacheUsage | None = None
    finish_reason: str | None = None
    error: ScriptedError | None = None


Step: TypeAlias = ScriptedTurn | ScriptedError | Block | str | Sequence[Block | str]
"""What a script holds for one request: a turn, an error status, or blocks (a block,
a string, or a sequence of them: one turn)."""


def _turn(step: Step) -> ScriptedTurn | ScriptedError:
    if isinstance(step, ScriptedTurn | ScriptedError):
        return step
    return ScriptedTurn(_blocks(step))


class ScriptExhausted(AssertionError):
    """A request came after the script's last turn: the code under test asked the model
    once more than the test said it would. It fails the test (the server's block ends
    with it)."""


@attrs.frozen
class _WireSpec:
    """What serving a script in one wire takes: where the client points, and how the
    request says it wants a stream."""

    provider: ProviderEndpoint
    suffix: str  # appended to the server's URL for the client's base URL
    streamed: Callable[[RecordedRequest], bool]
    responses: bool = False  # the OpenAI family's /responses route
    completion: bool = False  # llama.cpp's native /completion route


def _stream_flag(request: RecordedRequest) -> bool:
    return bool(request.json().get("stream"))


_SPECS: dict[Wire, _WireSpec] = {
    "chat": _WireSpec(ProviderEndpoint.OPENAI, "/v1", _stream_flag),
    "responses": _WireSpec(ProviderEndpoint.OPENAI, "/v1", _stream_flag, responses=True),
    "anthropic": _WireSpec(ProviderEndpoint.ANTHROPIC, "", _stream_flag),
    "gemini": _WireSpec(
        ProviderEndpoint.GOOGLE_GEMINI, "", lambda r: ":streamGenerateContent" in r.path
    ),
    "llamacpp": _WireSpec(ProviderEndpoint.LLAMA_CPP, "", _stream_flag, completion=True),
}


def _spec(wire: str) -> _WireSpec:
    spec = _SPECS.get(wire)  # type: ignore[call-overload]
    if spec is None:
        raise ConfigurationError(f"no wire {wire!r}: one of {', '.join(WIRES)}")
    assert isinstance(spec, _WireSpec)
    return spec


class Script:
    """The replies of a script, one turn per request in order: a function from a
    :class:`~cuca.testing.RecordedRequest` to a :class:`~cuca.testing.Reply`, for
    :func:`~cuca.testing.open_replay_server` (or :func:`open_scripted_server`).

    Each reply is encoded when its request arrives, in the framing the request asks
    for: a stream, or one whole JSON response (``stream: false``, Gemini's
    ``generateContent``). ``served`` counts the turns answered. A request after the
    last turn raises :class:`ScriptExhausted`.
    """

    def __init__(self, turns: Sequence[Step], wire: Wire = "chat") -> None:
        self.wire = wire
        self.spec = _spec(wire)
        self.turns = [_turn(step) for step in turns]
        self.served = 0
        if wire == "llamacpp":
            _text_only(self.turns)

    def __call__(self, request: RecordedRequest) -> Reply:
        if self.served >= len(self.turns):
            raise ScriptExhausted(
                f"request {self.served + 1} ({request.method} {request.path}) came after "
                f"the script's {len(self.turns)} turn(s)"
            )
        step = self.turns[self.served]
        self.served += 1
        return self.reply(step, request)

    def reply(self, step: ScriptedTurn | ScriptedError, request: RecordedRequest) -> Reply:
        """The reply of ``step`` to ``request`` in this script's wire."""
        outbound = import_module(f"cuca.providers.{self.wire}.outbound")
        if isinstance(step, ScriptedError):
            status, body = outbound.error_body(step.exception(), step.status)
            return Reply(json.dumps(body).encode(), status=status, headers=_JSON)
        model = _model(request)
        ending = _ending(step)
        if self.spec.streamed(request):
            return Reply(_streamed(outbound, self.wire, step, ending, model, request), headers=_SSE)
        whole = _whole(outbound, self.wire, step.blocks, ending, model)
        return Reply(json.dumps(whole).encode(), headers=_JSON)


def _model(request: RecordedRequest) -> str:
    """The model the request named (Gemini names it in the path)."""
    if "/models/" in request.path:
        return request.path.split("/models/", 1)[1].split(":", 1)[0]
    try:
        model = request.json().get("model")
    except ValueError:
        model = None
    return model if isinstance(model, str) else "scripted"


def _ending(turn: ScriptedTurn) -> Any:
    from cuca.providers.serving import Ending

    return Ending(turn.usage, turn.prompt_cache_usage, turn.finish_reason)


def _streamed(
    outbound: Any,
    wire: Wire,
    turn: ScriptedTurn,
    ending: Any,
    model: str,
    request: RecordedRequest,
) -> bytes:
    """The turn's stream: the opening, a frame per block, the end or the error."""
    if wire == "chat":
        options = request.json().get("stream_options") or {}
        writer = outbound.ChatStream(model, include_usage=bool(options.get("include_usage")))
    else:
        writer = _WRITERS[wire](outbound)(model)
    usage = turn.usage
    parts = [writer.open(usage.prompt_tokens if usage is not None else None)]
    parts += [writer.write(block) for block in turn.blocks]
    if turn.error is not None:
        parts.append(writer.fail(turn.error.exception()))
    else:
        parts.append(writer.close(ending))
    return b"".join(parts)


_WRITERS: dict[str, Callable[[Any], Callable[[str], Any]]] = {
    "responses": lambda module: module.ResponseStream,
    "anthropic": lambda module: module.MessageStream,
    "gemini": lambda module: module.GeminiStream,
    "llamacpp": lambda module: module.CompletionStream,
}

_WHOLE = {
    "chat": "completion",
    "responses": "response",
    "anthropic": "message",
    "gemini": "response",
    "llamacpp": "completion",
}


def _whole(
    outbound: Any, wire: Wire, blocks: tuple[Block, ...], ending: Any, model: str
) -> dict[str, Any]:
    whole: dict[str, Any] = getattr(outbound, _WHOLE[wire])(blocks, ending, model)
    return whole


def _text_only(turns: list[ScriptedTurn | ScriptedError]) -> None:
    """llama.cpp's ``/completion`` route carries text only: refuse the rest when the
    script is written, not when a test wonders where its tool call went."""
    for turn in turns:
        for block in turn.blocks if isinstance(turn, ScriptedTurn) else ():
            if not isinstance(block, Text):
                raise ConfigurationError(
                    f"the llamacpp wire (llama.cpp's /completion route) carries text only, "
                    f"not {type(block).__name__}"
                )


@attrs.frozen
class ScriptedServer:
    """A running scripted server (from :func:`open_scripted_server`): the replay server
    answering the ``script``, and what a client of its wire needs."""

    server: ReplayServer
    script: Script

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests the code under test sent, in order."""
        return self.server.requests

    @property
    def provider(self) -> ProviderEndpoint:
        return self.script.spec.provider

    @property
    def base_url(self) -> str:
        """The ``base_url`` a :class:`~cuca.CucaClient` of this wire takes."""
        return self.server.url + self.script.spec.suffix

    @property
    def provider_config(self) -> Any:
        """The ``provider_config`` the wire needs (the Responses API, llama.cpp's
        ``/completion`` route), else ``None``."""
        if self.script.spec.responses:
            from cuca.providers.chat.config import OpenAiApi, OpenAiConfig

            return OpenAiConfig(api=OpenAiApi.RESPONSES)
        if self.script.spec.completion:
            from cuca.providers.llamacpp.encode import LlamaCppConfig, LlamaRoute

            return LlamaCppConfig(route=LlamaRoute.COMPLETION)
        return None

    def client(self, **options: Any) -> CucaClient:
        """A :class:`~cuca.CucaClient` pointed at this server in its wire (a test key;
        ``options`` go to the client: plugins, stages, retry...)."""
        from cuca.client import CucaClient

        options.setdefault("api_key", "test-key")
        if self.provider_config is not None:
            options.setdefault("provider_config", self.provider_config)
        return CucaClient(self.provider, base_url=self.base_url, **options)


@asynccontextmanager
async def open_scripted_server(
    turns: Sequence[Step], wire: Wire = "chat"
) -> AsyncIterator[ScriptedServer]:
    """Serve ``turns`` on loopback in ``wire``'s framing, one per request, for the block.

    ``server.client()`` is a client of that wire pointed at it; ``server.requests``
    what was sent. A request after the last turn fails the block with
    :class:`ScriptExhausted`."""
    script = Script(turns, wire)
    async with open_replay_server(script) as server:
        yield ScriptedServer(server, script)
