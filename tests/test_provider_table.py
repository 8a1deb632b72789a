"""One provider table: the registry, the command and the docs read it; a wrong
``provider_config`` is refused for every endpoint, naming the type it takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuca import (
    AnthropicConfig,
    ConfigurationError,
    CucaClient,
    LlamaCppConfig,
    ProviderEndpoint,
)
from cuca.cli.config import API_KEY_ENV, DEFAULT_MODELS
from cuca.cli.options import PROVIDER_NAMES
from cuca.providers import ClientSettings, HttpRequest, ProviderAdapter, StreamDecoder
from cuca.providers.registry import adapter_for
from cuca.providers.table import ENDPOINTS, by_cli_name, import_path

ROOT = Path(__file__).resolve().parents[1]
HTTP = [info for info in ENDPOINTS if info.adapter is not None]


def test_provider_table_names_every_endpoint_once() -> None:
    assert ProviderEndpoint.BUILTIN == tuple(info.kind for info in ENDPOINTS)
    assert PROVIDER_NAMES == tuple(info.cli_name for info in ENDPOINTS)
    for info in ENDPOINTS:
        assert by_cli_name(info.cli_name) is info
        assert by_cli_name(info.kind.replace("_", "-").upper()) is info
        assert ProviderEndpoint.parse(info.cli_name) == ProviderEndpoint(info.kind)


def test_provider_table_drives_the_command() -> None:
    assert API_KEY_ENV == {i.kind: i.key_env for i in ENDPOINTS if i.key_env}
    assert DEFAULT_MODELS == {i.kind: i.default_model for i in ENDPOINTS if i.default_model}


@pytest.mark.parametrize("info", HTTP, ids=lambda info: info.kind)
def test_provider_table_adapter_and_default_url(info: object) -> None:
    """Each HTTP entry's factory builds an adapter that posts under its default URL."""
    from cuca import UnifiedRequest

    assert hasattr(info, "kind")
    endpoint = ProviderEndpoint(info.kind)  # type: ignore[attr-defined]
    adapter = adapter_for(ClientSettings(endpoint, api_key="k"))
    assert isinstance(adapter, ProviderAdapter)
    assert callable(import_path(info.adapter))  # type: ignore[attr-defined]
    wire = adapter.encode(UnifiedRequest.new("m").add_user_message("hi"))
    assert isinstance(wire, HttpRequest)
    assert wire.url.startswith(info.base_url)  # type: ignore[attr-defined]
    assert isinstance(adapter.new_decoder(UnifiedRequest.new("m")), StreamDecoder)


def test_provider_table_docs_list_the_providers() -> None:
    """docs/cli.md's --provider row and default models, and a page per provider."""
    cli = (ROOT / "docs" / "cli.md").read_text()
    row = next(line for line in cli.splitlines() if line.startswith("| `--provider NAME`"))
    named = re.findall(r"`(\w+)`", row.split("|")[2])  # then "(default `local`)"
    assert list(dict.fromkeys(named)) == list(PROVIDER_NAMES)
    for info in ENDPOINTS:
        if info.docs is not None:
            assert (ROOT / "docs" / "providers" / info.docs).is_file(), info.docs
        if info.default_model and info.kind != "local":
            assert f"`{info.cli_name}` `{info.default_model}`" in cli


WRONG = object()


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        (ProviderEndpoint.OPENAI, "openai takes an OpenAiConfig, not object"),
        (ProviderEndpoint.VLLM, "vllm takes an OpenAiConfig, not object"),
        (ProviderEndpoint.LM_STUDIO, "lm_studio takes an OpenAiConfig, not object"),
        (ProviderEndpoint.ANTHROPIC, "anthropic takes an AnthropicConfig, not object"),
        (ProviderEndpoint.GOOGLE_GEMINI, "gemini takes no provider_config, not object"),
        (ProviderEndpoint.DEEPSEEK, "deepseek takes no provider_config, not object"),
        (
            ProviderEndpoint.LLAMA_CPP,
            "llama_cpp takes a LlamaCppConfig or an OpenAiConfig, not object",
        ),
        (ProviderEndpoint.LOCAL, "local takes no provider_config, not object"),
    ],
)
def test_provider_table_wrong_provider_config_names_the_expected_type(
    endpoint: ProviderEndpoint, message: str
) -> None:
    """What the user sees: a ConfigurationError before any I/O, naming the type."""

    class Model:  # the local pipeline is built without touching a model
        turn_lock = None

    model: object = Model()
    client = CucaClient(endpoint, api_key="k", provider_config=WRONG, local_model=model)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as info:
        client.pipeline()
    assert info.value.message == message


def test_provider_table_a_config_of_another_endpoint_is_refused() -> None:
    client = CucaClient(ProviderEndpoint.ANTHROPIC, provider_config=LlamaCppConfig())
    with pytest.raises(ConfigurationError, match="anthropic takes an AnthropicConfig"):
        client.adapter()
    right = CucaClient(ProviderEndpoint.ANTHROPIC, api_key="k", provider_config=AnthropicConfig())
    assert right.adapter().endpoint == ProviderEndpoint.ANTHROPIC


ACME_BODY = (
    b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":'
    b'[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":'
    b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


async def test_provider_table_one_entry_adds_an_openai_compatible_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server added as one table entry (no code anywhere else) is named, dispatched,
    configured and streamed from, in its own dialect."""
    from cuca import OpenAiConfig, UnifiedRequest
    from cuca.providers import table
    from cuca.testing import Reply, open_replay_server

    acme = table.chat_server(
        "acme", "Acme", "http://127.0.0.1:1/v1", {"max_tokens_field": "max_output_tokens"}
    )
    monkeypatch.setattr(table, "ENDPOINTS", (*table.ENDPOINTS, acme))
    endpoint = ProviderEndpoint("acme")  # a built-in one is also a constant of cuca.types
    assert table.by_cli_name("ACME") is acme
    with pytest.raises(ConfigurationError, match="acme takes an OpenAiConfig, not object"):
        CucaClient(endpoint, provider_config=WRONG).adapter()
    request = UnifiedRequest.new("m").add_user_message("hi").set_max_tokens(5)
    async with open_replay_server(Reply(body=ACME_BODY)) as server:
        config = OpenAiConfig()
        async with CucaClient(endpoint, base_url=server.url, provider_config=config) as client:
            done = await client.generate(request)
    assert done.text == "hi"
    assert done.response.provider == endpoint
    sent = server.requests[0]
    assert sent.path == "/chat/completions"
    assert sent.json()["max_output_tokens"] == 5
    assert "authorization" not in sent.headers


def test_provider_table_declared_endpoints_are_table_entries() -> None:
    """Each ``ProviderEndpoint.NAME`` that type checkers know names a table entry, and
    every entry is an attribute at run time (declared or not)."""
    from typing import get_type_hints

    from cuca import types

    declared = {
        name
        for name, hint in get_type_hints(ProviderEndpoint, vars(types)).items()
        if "ClassVar[cuca.types.ProviderEndpoint]" in str(hint)
    }
    assert "OPENAI" in declared
    assert declared <= {info.kind.upper() for info in ENDPOINTS}
    for info in ENDPOINTS:
        assert getattr(ProviderEndpoint, info.kind.upper()) == ProviderEndpoint(info.kind)
