"""Redaction: streamed text across delta boundaries (a stage), the outbound request (a
plugin). The streamed property: however the text is cut, the output is what replacing
in the whole text gives, and only the longest tail that could still be a secret waits."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuca import (
    ConfigurationError,
    CucaClient,
    ProviderEndpoint,
    RedactRequest,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedRequest,
    merge_blocks,
)
from cuca.stages import Redactor, before, map_items, redact_text
from cuca.testing import Reply, chunkings, open_replay_server, split_points


def whole(secrets: list[str], text: str, replacement: str = "******") -> str:
    """What replacing in the whole text at once gives: the reference."""
    words = sorted({s for s in secrets if s}, key=len, reverse=True)
    return re.sub("|".join(map(re.escape, words)), replacement, text)


def streamed(secrets: list[str], pieces: list[str]) -> str:
    redactor = Redactor(secrets)
    return "".join(redactor.feed(piece) for piece in pieces) + redactor.flush()


def cut(text: str, points: list[int]) -> list[str]:
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


README_TEXT = "The secret is out; secret again."


def test_redact_every_split_of_the_readme_secret() -> None:
    """Both occurrences vanish at every cut, including inside "secret"."""
    for i in range(len(README_TEXT) + 1):
        for j in range(i, len(README_TEXT) + 1):
            out = streamed(["secret"], cut(README_TEXT, [i, j]))
            assert out == "The ****** is out; ****** again."


@given(st.data())
def test_redact_any_chunking_gives_the_whole_text_answer(data: st.DataObject) -> None:
    secrets = data.draw(st.lists(st.text("abc", min_size=1, max_size=4), min_size=1, max_size=3))
    text = data.draw(st.text("abcd", max_size=40))
    chunks = data.draw(chunkings(text.encode()))  # ASCII: bytes and characters agree
    pieces = [c.decode() for c in chunks]
    assert streamed(secrets, pieces) == whole(secrets, text)


@given(st.data())
def test_redact_any_split_of_unicode_text(data: st.DataObject) -> None:
    secrets = ["naïve🔑", "🔑é"]
    text = data.draw(st.text(st.sampled_from("naïve🔑é x"), max_size=30))
    points = data.draw(split_points(b"x" * len(text)))  # cuts between characters
    assert streamed(secrets, cut(text, points)) == whole(secrets, text)


@pytest.mark.parametrize(
    ("pieces", "released", "held"),
    [
        (["the sec"], "the ", 3),  # "sec" may become "secret"
        (["the se", "x"], "the sex", 0),  # it did not
        (["the secre"], "the ", 5),
        (["no match here"], "no match here", 0),
        (["secret"], "******", 0),  # whole: nothing waits
        (["a secrets"], "a ******", 1),  # the "s" may start another one
        (["a secretz"], "a ******z", 0),
        (["ssssecre"], "sss", 5),  # only the longest tail that can still match waits
    ],
)
def test_redact_holds_back_only_the_longest_possible_partial_match(
    pieces: list[str], released: str, held: int
) -> None:
    redactor = Redactor(["secret"])
    assert "".join(redactor.feed(p) for p in pieces) == released
    assert redactor.held == held


def test_redact_longest_secret_wins_at_one_position() -> None:
    assert streamed(["sec", "secret"], ["a sec", "ret b sec"]) == "a ****** b ******"
    assert streamed(["abcd", "cdxy"], ["ab", "cd", "xy"]) == "******xy"


@pytest.mark.parametrize("secrets", [[], [""], "secret", [3]])
def test_redact_refuses_secrets_it_cannot_use(secrets: Any) -> None:
    with pytest.raises(ConfigurationError):
        redact_text(secrets)


# -- the stage ----------------------------------------------------------------------------


def openai_frames(*deltas: str) -> bytes:
    frames = [json.dumps({"choices": [{"index": 0, "delta": {"content": d}}]}) for d in deltas]
    frames.append(json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    frames.append("[DONE]")
    return b"".join(f"data: {f}\n\n".encode() for f in frames)


REQUEST = UnifiedRequest.new("gpt-4o-mini").add_user_message("Tell me.")


async def answer(stages: list[Any], *deltas: str) -> list[Any]:
    async with open_replay_server(Reply(openai_frames(*deltas))) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k", stages=stages
        ) as client:
            async with client.generate_stream(REQUEST) as stream:
                return [item async for item in stream]


async def test_redact_stage_hides_a_secret_split_over_two_deltas() -> None:
    """The README's case: "...; sec" + "ret again" is hidden; a per-delta map leaks it."""

    def per_delta(item: Any) -> Any:
        return Text(item.text.replace("secret", "******")) if isinstance(item, Text) else item

    deltas = ("The secret is out; sec", "ret again.")
    leaked = await answer([before("chunk_hooks", map_items(per_delta))], *deltas)
    assert "".join(i.text for i in leaked) == "The ****** is out; secret again."
    items = await answer([before("chunk_hooks", redact_text(["secret"]))], *deltas)
    assert "".join(i.text for i in items) == "The ****** is out; ****** again."
    assert items[0] == Text("The ****** is out; ")  # only "sec" waited for the next delta


def test_redact_stage_keeps_order_and_signatures() -> None:
    """What is held is released before a block of another kind, and with a block that
    carries a signature (which closes its part, as merge_blocks reads it)."""
    from cuca.stages.redact import _Run  # the stage's per-turn state, without a turn

    run = _Run(["secret"], "******")
    out: list[Any] = []
    items = [
        Thinking("my sec"),
        Thinking("ret", signature="sig"),
        Text("a sec"),
        ToolCall("call_1", "f", {}),
        Text("ret"),
    ]
    for item in items:
        run.item(item, out)
    run.release(out)
    assert out == [
        Thinking("my "),
        Thinking("******", signature="sig"),
        Text("a "),
        Text("sec"),  # a tool call came between: "sec" and "ret" are not one word
        ToolCall("call_1", "f", {}),
        Text("ret"),
    ]
    assert merge_blocks(out)[0] == Thinking("my ******", signature="sig")


# -- the request plugin ---------------------------------------------------------------------


async def test_redact_request_plugin_keeps_keys_and_addresses_out_of_the_wire() -> None:
    key = "sk-proj-" + "a1B2" * 8
    request = (
        UnifiedRequest.new("gpt-4o-mini")
        .add_system_message("Support bot. Escalate to boss@corp.example.")
        .add_user_message(f"My key {key} fails, mail me at ada@example.com")
        .add_assistant_message(ToolCall("call_1", "lookup", {"email": "ada@example.com"}))
        .add_tool_result("call_1", "owner: ada@example.com, token Bearer abcdefghijklmnopqrstu")
        .add_assistant_message(Thinking("signed ada@example.com", signature="s"))
    )
    plugin = RedactRequest()
    async with open_replay_server(Reply(openai_frames("ok"))) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k", plugins=[plugin]
        ) as client:
            await client.generate(request)
    body = server.requests[0].body.decode()
    assert key not in body and "boss@corp.example" not in body
    assert "abcdefghijklmnopqrstu" not in body
    assert body.count("[REDACTED:email]") == 4 and "[REDACTED:api_key]" in body
    assert "[REDACTED:bearer]" in body
    assert plugin.redacted == 6
    signed = await plugin.on_request(request)
    assert signed.messages[-1].content[0] == Thinking("signed ada@example.com", signature="s")
    assert signed.messages[3].content[0] == ToolResult(
        "call_1", "owner: [REDACTED:email], token [REDACTED:bearer]"
    )


def test_redact_request_refuses_a_bad_pattern() -> None:
    with pytest.raises(ConfigurationError, match="not a regular expression"):
        RedactRequest({"broken": "("})
