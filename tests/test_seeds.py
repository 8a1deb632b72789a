"""Seed fidelity: places where the seeds (shared/seeds/) promise a behaviour, each test
quoting the sentence it checks.

The requests are encoded by the real adapters; the keyless gateways and the
``/completion`` count go through a whole turn against the loopback replay server, which
records what cuca sent.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.transcripts import transcript

from cuca import (
    AnthropicConfig,
    AnthropicThinkingParams,
    ConfigurationError,
    CucaClient,
    CucaPlugin,
    LlamaCppConfig,
    LlamaRoute,
    ProviderEndpoint,
    Text,
    ThinkingConfig,
    ThinkingEffort,
    TokenUsage,
    UnifiedRequest,
    UnifiedResponse,
)
from cuca.providers.anthropic.encode import make_anthropic, make_deepseek_bridge
from cuca.providers.base import ClientSettings
from cuca.providers.gemini.encode import make_gemini
from cuca.providers.llamacpp.encode import completion_prompt
from cuca.testing import Reply, open_replay_server

ANTHROPIC = ProviderEndpoint.ANTHROPIC
DEEPSEEK = ProviderEndpoint.DEEPSEEK
GEMINI = ProviderEndpoint.GOOGLE_GEMINI
REQUEST = UnifiedRequest.new("claude-sonnet-4-5").add_user_message("Why is the sky blue?")
KEYED = ClientSettings(ANTHROPIC, api_key="sk-ant-test")
BRIDGE = ClientSettings(DEEPSEEK, base_url="https://api.deepseek.com/anthropic", api_key="k")
ADAPTIVE = ClientSettings(
    ANTHROPIC, api_key="sk-ant-test", provider_config=AnthropicConfig(adaptive_thinking=True)
)

# Seed 001's thinking table: effort, Anthropic budget_tokens, Anthropic adaptive effort.
SEED_001_TABLE = [
    (ThinkingEffort.MINIMAL, 1024, "low"),
    (ThinkingEffort.LOW, 2048, "low"),
    (ThinkingEffort.MEDIUM, 8192, "medium"),
    (ThinkingEffort.HIGH, 16384, "high"),
    (ThinkingEffort.XHIGH, 16384, "xhigh"),
]


def anthropic_body(request: UnifiedRequest, settings: ClientSettings = KEYED) -> dict[str, Any]:
    body: dict[str, Any] = make_anthropic(settings).encode(request).body
    return body


# -- 1. Anthropic thinking without max_tokens ----------------------------------------


@pytest.mark.parametrize(("effort", "budget", "_adaptive"), SEED_001_TABLE)
def test_seed_001_thinking_without_max_tokens_leaves_1024_for_the_answer(
    effort: ThinkingEffort, budget: int, _adaptive: str
) -> None:
    """Seed 001: "That adapter sends 1024 when the field is unset, since the alternative
    is refusing a request the caller considers complete." With thinking on, the budget
    comes on top of those 1024 tokens instead of the request being refused."""
    body = anthropic_body(REQUEST.set_thinking(effort))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == budget + 1024


def test_seed_001_thinking_without_effort_or_max_tokens() -> None:
    """Seed 001 (as above): an enabled thinking with no effort is MEDIUM's 8192."""
    body = anthropic_body(REQUEST.set_thinking(ThinkingConfig(enabled=True)))
    assert (body["max_tokens"], body["thinking"]["budget_tokens"]) == (8192 + 1024, 8192)


def test_seed_001_native_budget_without_max_tokens() -> None:
    """Seed 001 (as above): a native budget_tokens gets the same 1024 on top."""
    thinking = ThinkingConfig(True, params=AnthropicThinkingParams(budget_tokens=3000))
    body = anthropic_body(REQUEST.set_thinking(thinking))
    assert (body["max_tokens"], body["thinking"]) == (
        4024,
        {"type": "enabled", "budget_tokens": 3000},
    )


@pytest.mark.parametrize("thinking", [None, ThinkingConfig.off()])
def test_seed_001_max_tokens_unset_without_thinking_is_1024(
    thinking: ThinkingConfig | None,
) -> None:
    """Seed 001: "That adapter sends 1024 when the field is unset"."""
    assert anthropic_body(REQUEST.set_thinking(thinking))["max_tokens"] == 1024


def test_seed_001_a_max_tokens_the_caller_set_is_sent_as_set() -> None:
    """Seed 001: "An unset Option means the adapter omits the key instead of inventing a
    default" — a set max_tokens is the caller's: sent as is, and refused (before any
    I/O) only when Anthropic would refuse it, at or below the budget."""
    assert (
        anthropic_body(REQUEST.set_thinking(ThinkingEffort.LOW).set_max_tokens(2049))["max_tokens"]
        == 2049
    )
    with pytest.raises(ConfigurationError, match=r"budget_tokens \(2048\).*max_tokens \(2048\)"):
        anthropic_body(REQUEST.set_thinking(ThinkingEffort.LOW).set_max_tokens(2048))


@pytest.mark.parametrize(("effort", "budget", "_adaptive"), SEED_001_TABLE)
def test_seed_001_deepseek_bridge_thinking_without_max_tokens(
    effort: ThinkingEffort, budget: int, _adaptive: str
) -> None:
    """Seed 001: "Anthropic and DeepSeek's bridge route post /messages"; the bridge's
    thinking is a mode without a budget, and the same budget + 1024 is sent as
    max_tokens so that thinking does not eat the answer's 1024 tokens."""
    body: dict[str, Any] = make_deepseek_bridge(BRIDGE).encode(REQUEST.set_thinking(effort)).body
    assert body["thinking"] == {"type": "enabled"}
    assert body["max_tokens"] == budget + 1024


def test_seed_001_deepseek_bridge_without_thinking_sends_1024() -> None:
    """Seed 001: "That adapter sends 1024 when the field is unset"."""
    for thinking in (None, ThinkingConfig.off()):
        request = REQUEST.set_thinking(thinking)
        assert make_deepseek_bridge(BRIDGE).encode(request).body["max_tokens"] == 1024


# -- 2. adaptive thinking from the unified effort ------------------------------------


@pytest.mark.parametrize(("effort", "budget", "adaptive"), SEED_001_TABLE)
def test_seed_001_adaptive_column_from_the_unified_effort(
    effort: ThinkingEffort, budget: int, adaptive: str
) -> None:
    """Seed 001: "Each provider gets its closest native control", and the table's
    "Anthropic adaptive effort" column: with AnthropicConfig(adaptive_thinking=True) a
    unified ThinkingEffort maps through that column."""
    body = anthropic_body(REQUEST.set_thinking(effort), ADAPTIVE)
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": adaptive}
    assert body["max_tokens"] == budget + 1024  # unset: the answer keeps its 1024


def test_seed_001_adaptive_mode_keeps_a_set_max_tokens_below_every_budget() -> None:
    """Seed 001's adaptive column has no budget, so a small max_tokens is valid there."""
    body = anthropic_body(REQUEST.set_thinking(ThinkingEffort.HIGH).set_max_tokens(1024), ADAPTIVE)
    assert (body["max_tokens"], body["output_config"]) == (1024, {"effort": "high"})


def test_seed_001_a_native_override_wins_over_the_adaptive_mode() -> None:
    """Seed 001: "ThinkingParams carries a native value for a caller who needs it, and a
    set override wins over the unified effort.\""""
    params = AnthropicThinkingParams(budget_tokens=3000)
    body = anthropic_body(REQUEST.set_thinking(ThinkingConfig(True, params=params)), ADAPTIVE)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 3000}
    assert "output_config" not in body


def test_seed_001_budget_mode_is_the_default() -> None:
    """Seed 001's "Anthropic budget_tokens" column is what a plain config sends."""
    body = anthropic_body(REQUEST.set_thinking(ThinkingEffort.HIGH))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert "output_config" not in body


# -- 3. llama.cpp /completion prompt order -------------------------------------------


def test_seed_002_completion_system_text_comes_first() -> None:
    """Seed 002: "System message text comes first as bare context. User and Assistant
    messages are marked with ### User: and ### Assistant: prefixes." — even when the
    system message stands after a user turn."""
    conversation = (
        UnifiedRequest.new("m")
        .add_user_message("Capital of France?")
        .add_system_message("You are terse.")
        .add_assistant_message("Paris.")
        .add_system_message("Answer in English.")
        .add_user_message("And Italy?")
    )
    assert completion_prompt(conversation) == (
        "You are terse.\n"
        "Answer in English.\n"
        "### User: Capital of France?\n"
        "### Assistant: Paris.\n"
        "### User: And Italy?\n"
        "### Assistant:"
    )


# -- the /completion count -----------------------------------------------------------


class _Summaries(CucaPlugin):
    def __init__(self) -> None:
        self.responses: list[UnifiedResponse] = []

    async def on_response_complete(self, response: UnifiedResponse) -> None:
        self.responses.append(response)


async def test_seed_002_completion_counts_one_per_text_block_with_usage_none() -> None:
    """Seed 002: "Completion route: no token counts are read. UnifiedResponse::usage is
    None, prompt_tokens is 0, and completion_tokens counts one per Text block." The
    counts reach the caller's stream response and every plugin's on_response_complete."""
    plugin = _Summaries()
    config = LlamaCppConfig(route=LlamaRoute.COMPLETION)
    request = UnifiedRequest.new("m").add_user_message("Say hi.")
    async with open_replay_server(Reply(transcript("llama_cpp/completion"))) as server:
        async with CucaClient(
            ProviderEndpoint.LLAMA_CPP, base_url=server.url, provider_config=config,
            plugins=[plugin],
        ) as client:  # fmt: skip
            async with client.generate_stream(request) as stream:
                items = [item async for item in stream]
    texts = [item for item in items if isinstance(item, Text)]
    assert len(texts) >= 2  # the transcript streams several pieces
    assert stream.response is not None
    assert stream.response.usage is None
    assert stream.response.counted_usage == TokenUsage(0, len(texts))
    assert [r.counted_usage for r in plugin.responses] == [TokenUsage(0, len(texts))]
    assert plugin.responses[0].usage is None


async def test_counted_usage_is_none_where_the_server_reports_usage() -> None:
    """Only the /completion route counts for itself; the chat route reads the server's."""
    async with open_replay_server(Reply(transcript("llama_cpp/chat_tool_call"))) as server:
        async with CucaClient(ProviderEndpoint.LLAMA_CPP, base_url=server.url) as client:
            done = await client.generate(UnifiedRequest.new("m").add_user_message("Weather?"))
    assert done.response.usage is not None
    assert done.response.counted_usage is None


# -- 4. keyless gateways -------------------------------------------------------------

SEED_004_ANTHROPIC = {
    "model": "your-reasoning-model",
    "max_tokens": 1024,
    "thinking": {"type": "enabled"},
    "messages": [{"role": "user", "content": "What is the weather in Rome?"}],
}
SEED_004_REQUEST = (
    UnifiedRequest.new("your-reasoning-model")
    .add_user_message("What is the weather in Rome?")
    .set_max_tokens(1024)
    .set_thinking(True)
)


async def test_seed_004_anthropic_example_reaches_a_keyless_gateway() -> None:
    """Seed 004 (LocalAI): "The thinking block is only emitted when the request opts in
    with the thinking parameter", shown with {"max_tokens": 1024, "thinking": {"type":
    "enabled"}} posted to /v1/messages with no key. With a base_url, cuca sends it with
    no auth header; 1024 max_tokens leave no room for a budget, so the adaptive mode
    carries the thinking opt-in."""
    config = AnthropicConfig(adaptive_thinking=True)
    async with open_replay_server(Reply(transcript("anthropic/thinking"))) as server:
        base = f"{server.url}/v1"
        async with CucaClient(ANTHROPIC, base_url=base, provider_config=config) as client:
            done = await client.generate(SEED_004_REQUEST)
        sent = server.requests[0]
    assert done.blocks
    assert sent.path == "/v1/messages"
    assert not sent.headers.keys() & {"x-api-key", "authorization"}
    body = sent.json()
    for key in ("model", "max_tokens"):
        assert body[key] == SEED_004_ANTHROPIC[key]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is the weather in Rome?"}]}
    ]
    assert body["thinking"] == {"type": "adaptive"}


async def test_seed_004_budget_thinking_without_max_tokens_reaches_a_keyless_gateway() -> None:
    """Seed 004's example without its max_tokens: the budget mode sends budget + 1024."""
    request = UnifiedRequest.new("your-reasoning-model").add_user_message("Rome?")
    async with open_replay_server(Reply(transcript("anthropic/thinking"))) as server:
        async with CucaClient(ANTHROPIC, base_url=server.url) as client:
            await client.generate(request.set_thinking(ThinkingEffort.MINIMAL))
        sent = server.requests[0]
    assert not sent.headers.keys() & {"x-api-key", "authorization"}
    assert sent.json()["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent.json()["max_tokens"] == 2048


async def test_keyless_gemini_gateway_sends_no_key_header() -> None:
    """Seed 004: LocalAI and other local gateways serve vendor routes without a key. With
    a base_url, the Gemini adapter sends no x-goog-api-key."""
    request = UnifiedRequest.new("gemini-2.5-flash").add_user_message("Weather in Rome?")
    async with open_replay_server(Reply(transcript("gemini/tool_call"))) as server:
        async with CucaClient(GEMINI, base_url=server.url) as client:
            done = await client.generate(request)
        sent = server.requests[0]
    assert done.blocks
    assert sent.path.startswith("/v1beta/models/gemini-2.5-flash:streamGenerateContent")
    assert "x-goog-api-key" not in sent.headers


def test_a_key_is_still_sent_to_a_gateway_when_set() -> None:
    """With a base_url and a key, the key goes out as usual."""
    anthropic = ClientSettings(ANTHROPIC, base_url="http://127.0.0.1:9", api_key="k")
    gemini = ClientSettings(GEMINI, base_url="http://127.0.0.1:9", api_key="g")
    assert make_anthropic(anthropic).encode(REQUEST).headers["x-api-key"] == "k"
    assert make_gemini(gemini).encode(REQUEST).headers["x-goog-api-key"] == "g"


ANTHROPIC_HINT = "pass api_key= or set ANTHROPIC_API_KEY"
GEMINI_HINT = "pass api_key= or set GEMINI_API_KEY or GOOGLE_API_KEY"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (ClientSettings(ANTHROPIC), f"anthropic requires an api key: {ANTHROPIC_HINT}"),
        (ClientSettings(GEMINI), f"gemini requires an api key: {GEMINI_HINT}"),
    ],
)
def test_without_a_base_url_the_key_stays_required(settings: ClientSettings, message: str) -> None:
    """The vendors' own URLs refuse anonymous calls: the user sees a ConfigurationError
    before any I/O."""
    adapter = make_anthropic(settings) if settings.provider is ANTHROPIC else make_gemini(settings)
    with pytest.raises(ConfigurationError) as info:
        adapter.encode(REQUEST)
    assert info.value.message == message
