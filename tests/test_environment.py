"""Keys and base URLs from the vendors' own variables (docs/unified.md, Keys and base
URLs from the environment): what a user with ``OPENAI_API_KEY`` set sees."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cuca import (
    ConfigurationError,
    CucaClient,
    HttpStatusError,
    ProviderEndpoint,
    RetryPolicy,
    SessionLog,
    UnifiedRequest,
)
from cuca.providers.table import ENDPOINTS, env_base_url, env_key
from cuca.testing import Reply, open_replay_server

SECRET = "sk-canary-env-5d1e"
OK = (
    b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def ask() -> UnifiedRequest:
    return UnifiedRequest.new("gpt-4o").add_user_message("hi")


async def test_environment_key_and_base_url_reach_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with open_replay_server(Reply(OK)) as server:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        async with CucaClient(ProviderEndpoint.OPENAI) as client:
            done = await client.generate(ask())
    assert done.text == "hi"
    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"


async def test_environment_an_explicit_argument_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    async with open_replay_server(Reply(OK)) as server:
        given = CucaClient(ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="mine")
        keyless = CucaClient(ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="")
        async with given, keyless:
            await given.generate(ask())
            await keyless.generate(ask())
    first, second = server.requests
    assert first.headers["authorization"] == "Bearer mine"
    assert "authorization" not in second.headers  # api_key="": no key, env or not


def test_environment_gemini_reads_gemini_then_google(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "google")
    assert env_key("google_gemini") == "google"
    monkeypatch.setenv("GEMINI_API_KEY", "gemini")
    assert env_key("google_gemini") == "gemini"
    monkeypatch.setenv("GEMINI_API_KEY", "  ")  # empty counts as unset
    assert env_key("google_gemini") == "google"
    assert env_key("llama_cpp") is None and env_base_url("deepseek") is None


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        (
            ProviderEndpoint.OPENAI,
            "openai requires an API key at api.openai.com: pass api_key= or set OPENAI_API_KEY",
        ),
        (ProviderEndpoint.ANTHROPIC, "anthropic requires an api key: pass api_key= or set "
         "ANTHROPIC_API_KEY"),
        (ProviderEndpoint.GOOGLE_GEMINI, "gemini requires an api key: pass api_key= or set "
         "GEMINI_API_KEY or GOOGLE_API_KEY"),
        (
            ProviderEndpoint.DEEPSEEK,
            "deepseek requires an API key at api.deepseek.com: pass api_key= or set "
            "DEEPSEEK_API_KEY",
        ),
    ],
)
async def test_environment_missing_key_error_names_the_variable(
    provider: ProviderEndpoint, message: str
) -> None:
    async with CucaClient(provider) as client:
        with pytest.raises(ConfigurationError) as info:
            await client.generate(ask())
    assert info.value.message == message


async def test_environment_key_never_shown_in_repr_log_error_or_session_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    reply = Reply(b'{"error": {"message": "denied"}}', status=401)
    with SessionLog(tmp_path / "log.db", raw=True) as log:
        async with open_replay_server(reply) as server:
            monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
            async with CucaClient(
                ProviderEndpoint.OPENAI, plugins=[log], retry=RetryPolicy.never()
            ) as client:
                shown = [repr(client), str(client), repr(client.adapter())]
                with pytest.raises(HttpStatusError) as info:
                    await client.generate(ask())
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    shown += [repr(info.value), str(info.value), caplog.text]
    for text in shown:
        assert SECRET not in text, text
    assert SECRET.encode() not in (tmp_path / "log.db").read_bytes()


def test_environment_names_are_declared_once_in_the_table() -> None:
    """The command's list is the table's: one list, not two."""
    from cuca.cli.config import API_KEY_ENV

    assert API_KEY_ENV == {info.kind: info.key_env for info in ENDPOINTS if info.key_env}
    docs = (Path(__file__).parents[1] / "docs" / "unified.md").read_text()
    for info in ENDPOINTS:
        for name in (*info.key_env, *info.base_url_env):
            assert f"`{name}`" in docs, name
