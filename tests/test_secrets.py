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
