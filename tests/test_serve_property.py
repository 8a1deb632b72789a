"""For every inbound wire and every backend wire, what cuca's own client reads through
``cuca serve`` equals what it reads from the backend directly (issue 34 §5): the same
blocks in the same order (reasoning, text, tool calls with their ids and arguments),
the backend's signatures (opened from the server's seal where the inbound wire carries
one; the chat wire has no place for a signature and drops it, as docs/serve.md says)
and the same usage, whatever turn the backend gives and however its bytes are chunked
on the way (Hypothesis; a few examples per pair, each two loopback exchanges).

llama.cpp's native ``/completion`` carries text only, and cuca reads no token counts
from it (seed 002: ``usage`` is ``None``): through the chat and Responses wires the
client reads no usage either (the server makes none up); the Messages wire must send
counts, and sends 0 and 0."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuca import CucaClient, ProviderEndpoint, UnifiedRequest
from cuca.providers.chat.config import OpenAiApi, OpenAiConfig
from cuca.serve import Backend, ServeApp, serve
from cuca.testing import (
    RecordedRequest,
    Reply,
    Script,
    ScriptedServer,
    ScriptedTurn,
    open_replay_server,
)
from cuca.types import Text, Thinking, TokenUsage, ToolCall

INBOUND = ("chat", "anthropic", "responses")
BACKENDS = ("chat", "responses", "anthropic", "gemini", "llamacpp")
"""The backend wires compared (``llamacpp``: llama.cpp's native ``/completion``)."""
ISSUERS = {
    "anthropic": ProviderEndpoint.ANTHROPIC,
    "gemini": ProviderEndpoint.GOOGLE_GEMINI,
    "responses": ProviderEndpoint.OPENAI,
}
"""The backends that sign their reasoning, and who issues the signature."""

WORDS = st.text(alphabet="abc xyz.,é\n", min_size=1, max_size=12)


@st.composite
def turns(draw: st.DrawFn, backend: str) -> ScriptedTurn:
    """A turn the backend may give: reasoning (signed where the wire signs), text, up
    to two tool calls, and its usage; text only on llama.cpp's ``/completion``."""
    usage = TokenUsage(draw(st.integers(1, 400)), draw(st.integers(1, 200)))
    if backend == "llamacpp":
        return ScriptedTurn(
            [Text(w) for w in draw(st.lists(WORDS, min_size=1, max_size=4))], usage=usage
        )
    blocks: list[Any] = []
    if draw(st.booleans()):
        issuer = ISSUERS.get(backend)
        signature = draw(st.text("ABCdef0123+/=", min_size=4, max_size=16)) if issuer else None
        blocks.append(Thinking(draw(WORDS), signature=signature, provider=issuer))
    if draw(st.booleans()):
        blocks.append(Text(draw(WORDS)))
    for index in range(draw(st.integers(0, 2))):
        arguments = draw(st.dictionaries(st.sampled_from("ab"), st.integers(-5, 5), max_size=2))
        blocks.append(ToolCall(f"call_{index}_x", draw(st.sampled_from("fg")), arguments))
    if not blocks:
        blocks.append(Text(draw(WORDS)))
    return ScriptedTurn(blocks, usage=usage)


CHUNKS = st.lists(st.integers(1, 48), max_size=6)


def chunked(script: Script, sizes: list[int]) -> Any:
    """The script's replies, their first bytes written in ``sizes``."""

    def reply(request: RecordedRequest) -> Reply:
        return attrs.evolve(script(request), chunks=tuple(sizes) or None)

    return reply


def reader(wire: str, url: str) -> CucaClient:
    """cuca's own client of the inbound ``wire``, pointed at the server."""
    if wire == "anthropic":
        return CucaClient(ProviderEndpoint.ANTHROPIC, base_url=f"{url}/v1", api_key="k")
    config = OpenAiConfig(api=OpenAiApi.RESPONSES) if wire == "responses" else None
    return CucaClient(
        ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key="k", provider_config=config
    )


def seen(blocks: Any, app: ServeApp | None, keeps_signatures: bool) -> list[tuple[Any, ...]]:
    """Blocks as the comparison sees them: reasoning by text and the backend's signature
    (a seal opened), adjacent text or reasoning joined, calls by id, name, arguments."""
    out: list[tuple[Any, ...]] = []
    for block in blocks:
        if isinstance(block, Thinking):
            signature = block.signature
            if app is not None and signature:
                signature = app.signatures.open(block.text, signature).signature
            entry: tuple[Any, ...] = (
                "thinking",
                block.text,
                signature if keeps_signatures else None,
            )
        elif isinstance(block, Text):
            entry = ("text", block.text, None)
        elif isinstance(block, ToolCall):
            entry = ("call", block.id, block.name, dict(block.arguments))
        else:
            entry = (type(block).__name__,)
        if out and entry[0] in ("thinking", "text") and out[-1][0] == entry[0]:
            last = out.pop()
            entry = (entry[0], last[1] + entry[1], entry[2] or last[2])
        if entry[0] == "text" and not entry[1]:
            continue
        out.append(entry)
    return out


async def read(client: CucaClient) -> tuple[Any, tuple[int, int] | None]:
    request = UnifiedRequest.new("m").add_user_message("hi")
    async with client:
        completion = await client.generate(request)
    usage = completion.response.usage
    if usage is None:
        return completion.blocks, None
    return completion.blocks, (usage.prompt_tokens, usage.completion_tokens)


async def compare(inbound: str, backend: str, turn: ScriptedTurn, sizes: list[int]) -> None:
    direct_script, served_script = Script([turn], backend), Script([turn], backend)  # type: ignore[arg-type]
    async with open_replay_server(chunked(direct_script, sizes)) as first:
        direct, direct_usage = await read(ScriptedServer(first, direct_script).client())
    async with open_replay_server(chunked(served_script, sizes)) as second:
        upstream = ScriptedServer(second, served_script).client()
        async with upstream, trio.open_nursery() as nursery:
            app = ServeApp({"*": Backend(upstream)})
            url = await nursery.start(serve, app, "127.0.0.1", 0)
            through, through_usage = await read(reader(inbound, url))
            nursery.cancel_scope.cancel()
    keeps = inbound != "chat"
    assert seen(through, app, keeps) == seen(direct, None, keeps)
    if backend == "llamacpp":
        assert direct_usage is None  # seed 002: no token counts are read
        # the Messages wire has no way to say "not counted"
        assert through_usage == ((0, 0) if inbound == "anthropic" else None)
    else:
        assert through_usage == direct_usage


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inbound", INBOUND)
def test_serve_property_reads_through_the_server_as_from_the_backend(
    inbound: str, backend: str
) -> None:
    @settings(
        max_examples=3,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(turn=turns(backend), sizes=CHUNKS)
    def check(turn: ScriptedTurn, sizes: list[int]) -> None:
        trio.run(compare, inbound, backend, turn, sizes)

    check()
