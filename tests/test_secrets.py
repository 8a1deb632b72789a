"""API keys and bearer tokens never show in a repr, a str or a log record."""

from __future__ import annotations

import logging

import pytest

from cuca import (
    AnthropicConfig,
    CucaClient,
    HttpStatusError,
    LlamaCppConfig,
    ProviderEndpoint,
    RetryPolicy,
    UnifiedRequest,
)
from cuca.providers.base import ClientSettings
from cuca.testing import Reply, open_replay_server

SECRET = "sk-canary-7f3a9b2c1d0e"


def test_secrets_configurations_hide_keys() -> None:
    shown = [
        repr(LlamaCppConfig(api_key=SECRET)),
        str(LlamaCppConfig(api_key=SECRET)),
        repr(AnthropicConfig(bearer_token=SECRET)),
        repr(ClientSettings(ProviderEndpoint.OPENAI, api_key=SECRET)),
        repr(CucaClient(ProviderEndpoint.OPENAI, api_key=SECRET)),
        str(CucaClient(ProviderEndpoint.OPENAI, api_key=SECRET)),
    ]
    for text in shown:
        assert SECRET not in text, text


@pytest.mark.parametrize(
    "provider,config",
    [
        (ProviderEndpoint.OPENAI, None),
        (ProviderEndpoint.ANTHROPIC, AnthropicConfig(bearer_token=SECRET)),
        (ProviderEndpoint.GOOGLE_GEMINI, None),
        (ProviderEndpoint.LLAMA_CPP, LlamaCppConfig(api_key=SECRET)),
    ],
    ids=["openai", "anthropic-bearer", "gemini", "llama_cpp"],
)
async def test_secrets_wire_requests_and_errors_hide_keys(
    provider: ProviderEndpoint, config: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    reply = Reply(b'{"error": {"message": "denied"}}', status=401)
    async with open_replay_server(reply) as server:
        base = server.url + ("/v1" if provider == ProviderEndpoint.OPENAI else "")
        async with CucaClient(
            provider,
            base_url=base,
            api_key=SECRET,
            provider_config=config,
            retry=RetryPolicy.never(),
        ) as client:
            wire = client.adapter().encode(UnifiedRequest.new("m").add_user_message("hi"))
            with pytest.raises(HttpStatusError) as info:
                await client.generate(UnifiedRequest.new("m").add_user_message("hi"))
    sent = server.requests[0].headers
    assert any(SECRET in value for value in sent.values()), "the key was really sent"
    for text in (repr(wire), str(wire), repr(info.value), str(info.value), caplog.text):
        assert SECRET not in text


@pytest.mark.parametrize(
    "key",
    [SECRET + "\n", "sk-canary-\u00e9t\u00e9-7f3a", "sk-canary\r\nX-Evil: 1"],
    ids=["newline", "non-ascii", "header-injection"],
)
async def test_secrets_malformed_key_is_a_configuration_error_that_does_not_quote_it(
    key: str,
) -> None:
    from cuca import ConfigurationError

    async with open_replay_server(Reply(b"")) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key=key
        ) as client:
            with pytest.raises(ConfigurationError) as info:
                await client.generate(UnifiedRequest.new("m").add_user_message("hi"))
    assert "check the API key" in str(info.value)
    assert key.strip() not in str(info.value) + repr(info.value)
    assert server.requests == []


async def test_secrets_url_credentials_never_reach_error_messages() -> None:
    from cuca import TransportError

    url = "http://user:hunter2-canary@127.0.0.1:9/v1"
    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url=url, api_key="k", retry=RetryPolicy.never()
    ) as client:
        with pytest.raises(TransportError) as info:
            await client.generate(UnifiedRequest.new("m").add_user_message("hi"))
    assert "hunter2-canary" not in str(info.value)
    assert "127.0.0.1:9/v1" in str(info.value)


async def test_secrets_invalid_url_and_unencodable_text_are_typed_errors() -> None:
    from cuca import ConfigurationError

    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url="http://[::1/v1", api_key="k"
    ) as client:
        with pytest.raises(ConfigurationError, match="invalid URL"):
            await client.generate(UnifiedRequest.new("m").add_user_message("hi"))
    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url="http://127.0.0.1:9/v1", api_key="k"
    ) as client:
        with pytest.raises(ConfigurationError, match="cannot be encoded"):
            await client.generate(UnifiedRequest.new("m").add_user_message("lone \ud800 surrogate"))
