"""Extra headers, on the client and on one turn (docs/unified.md, Extra headers): sent,
never replacing what the adapter sets, hidden when their names say they are secret."""

from __future__ import annotations

import pytest
from support.transcripts import transcript

from cuca import ConfigurationError, CucaClient, ProviderEndpoint, UnifiedRequest
from cuca.providers.base import HttpRequest, is_secret_header
from cuca.testing import Reply, open_replay_server

ASK = UnifiedRequest.new("gpt-4o").add_user_message("hi")
TEXT = Reply(transcript("openai/text"))


async def test_headers_of_the_client_and_the_turn_are_sent() -> None:
    async with open_replay_server(TEXT) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI,
            base_url=server.url + "/v1",
            api_key="k",
            headers={"X-Team": "search", "X-Trace": "client"},
        ) as client:
            await client.generate(ASK)
            await client.generate(ASK, headers={"x-trace": "turn-2"})
            async with client.generate_stream(ASK, headers={"X-Only": "3"}) as stream:
                async for _ in stream:
                    pass
    first, second, third = (request.headers for request in server.requests)
    assert (first["x-team"], first["x-trace"]) == ("search", "client")
    assert (second["x-team"], second["x-trace"]) == ("search", "turn-2")  # the turn's wins
    assert third["x-only"] == "3" and "x-only" not in first
    assert first["authorization"] == "Bearer k"


async def test_headers_reach_every_server_of_a_pool() -> None:
    async with open_replay_server(TEXT) as one, open_replay_server(TEXT) as two:
        urls = [one.url + "/v1", two.url + "/v1"]
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=urls, api_key="k", headers={"x-team": "a"}
        ) as client:
            await client.generate(ASK, headers={"x-turn": "1"})
            await client.generate(ASK, headers={"x-turn": "2"})
    sent = [r.headers for r in (*one.requests, *two.requests)]
    assert sorted(h["x-turn"] for h in sent) == ["1", "2"]
    assert all(h["x-team"] == "a" for h in sent)


@pytest.mark.parametrize("name", ["Authorization", "authorization"])
async def test_headers_never_replace_the_auth_header(name: str) -> None:
    async with open_replay_server(TEXT) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k"
        ) as client:
            with pytest.raises(ConfigurationError) as info:
                await client.generate(ASK, headers={name: "Bearer other"})
    assert str(info.value) == (
        f"configuration error: the extra header {name!r} would replace the auth header "
        'sent for the client\'s API key: pass the key as api_key=, or api_key="" to send '
        "your own"
    )
    assert server.requests == []


async def test_headers_with_no_key_may_carry_your_own_auth() -> None:
    async with open_replay_server(TEXT) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI,
            base_url=server.url + "/v1",
            api_key="",
            headers={"Authorization": "Bearer gateway"},
        ) as client:
            await client.generate(ASK)
    assert server.requests[0].headers["authorization"] == "Bearer gateway"


async def test_headers_the_adapter_sets_are_refused_too() -> None:
    async with open_replay_server(TEXT) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k"
        ) as client:
            with pytest.raises(ConfigurationError, match="'Content-Type' is one the adapter"):
                await client.generate(ASK, headers={"Content-Type": "text/plain"})
    assert server.requests == []


def test_headers_with_secret_names_are_hidden_in_a_repr() -> None:
    headers = {
        "x-portkey-api-key": "canary-1",
        "X-Goog-User-Token": "canary-2",
        "cf-aig-authorization": "canary-3",
        "Cookie": "canary-4",
        "x_client_secret": "canary-5",
        "x-trace-id": "shown",
    }
    shown = repr(HttpRequest("http://h", headers))
    assert "canary" not in shown
    assert "shown" in shown
    assert not is_secret_header("x-keyboard-layout")


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"x-n": 1}, "headers must be a mapping of header names to strings, not dict"),
        ("x-n: 1", "headers must be a mapping of header names to strings, not str"),
    ],
)
def test_headers_of_the_wrong_type_are_refused_at_once(headers: object, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        CucaClient(ProviderEndpoint.OPENAI, headers=headers)  # type: ignore[arg-type]
    assert info.value.message == message


def test_headers_on_the_local_engine_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="headers= is for HTTP providers"):
        CucaClient(ProviderEndpoint.LOCAL, headers={"x": "y"})
