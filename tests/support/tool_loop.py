"""The tool-loop cases: for every backend with tools, a first step that thinks and makes
two parallel calls, then a final answer, served by the replay server step after step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from cuca import CucaClient, ProviderEndpoint, ThinkingEffort, Tool, UnifiedRequest
from cuca.providers.chat.config import OpenAiApi, OpenAiConfig
from cuca.testing import Reply, open_replay_server

from .transcripts import transcript

QUESTION = "Weather in Paris and Tokyo?"


def get_weather(city: str = "", location: str = "", unit: str = "celsius") -> str:
    """Current weather of a city.

    Args:
        city: the city's name
        location: the place (the DeepSeek bridge transcript's name for it)
        unit: celsius or fahrenheit
    """
    return f"{city or location}: 18 {unit}"


def get_weather_in_units(city: str, units: str = "c") -> str:
    """Current weather of a city (the Responses transcript's parameters)."""
    return f"{city}: 18 {units}"


def weather(location: str, unit: str = "celsius") -> str:
    """Current weather of a place (the tool the Gemini transcript calls)."""
    return f"{location}: 18 {unit}"


def GetWeatherArgs(city: str, country: str, units: str) -> str:
    """Current weather of a city."""
    return f"{city}, {country}: 18 {units}"


def get_stock_price(ticker: str, exchange: str) -> str:
    """Last price of a stock."""
    return f"{exchange}:{ticker} 227.52"


@attrs.frozen
class Case:
    """One backend: its endpoint, its two transcripts and the request it starts from."""

    name: str
    endpoint: ProviderEndpoint
    first: str
    final: str
    model: str
    thinking: bool = True
    base_suffix: str = ""
    tools: tuple[Callable[..., str] | Tool, ...] = (get_weather,)
    config: Any = None

    def request(self) -> UnifiedRequest:
        request = UnifiedRequest.new(self.model).add_user_message(QUESTION).set_max_tokens(4096)
        return request.set_thinking(ThinkingEffort.LOW) if self.thinking else request


P = ProviderEndpoint
CASES = [
    Case(
        "openai",
        P.OPENAI,
        "openai/parallel_tool_calls",
        "openai/text",
        "gpt-4o",
        thinking=False,
        tools=(GetWeatherArgs, get_stock_price),
    ),
    Case("vllm", P.VLLM, "vllm/reasoning_two_calls", "vllm/reasoning_both_fields", "Qwen/Qwen3-8B"),
    Case("lm_studio", P.LM_STUDIO, "lm_studio/gpt_oss_two_calls", "lm_studio/reasoning", "gpt-oss"),
    Case("llama_cpp", P.LLAMA_CPP, "llama_cpp/chat_two_calls", "llama_cpp/chat_text", "qwen3"),
    Case(
        "deepseek",
        P.DEEPSEEK,
        "deepseek/thinking_two_calls",
        "deepseek/reasoner",
        "deepseek-v4-pro",
    ),
    Case(
        "deepseek_bridge",
        P.DEEPSEEK,
        "anthropic/deepseek_bridge_two_tools",
        "anthropic/text",
        "deepseek-v4-flash",
        base_suffix="/anthropic",
    ),
    Case(
        "anthropic",
        P.ANTHROPIC,
        "anthropic/thinking_two_tools",
        "anthropic/text",
        "claude-sonnet-4-20250514",
    ),
    Case(
        "openai_responses",
        P.OPENAI,
        "openai_responses/reasoning_two_tools",
        "openai_responses/final_answer",
        "gpt-5",
        tools=(Tool.from_function(get_weather_in_units, name="get_weather"),),
        config=OpenAiConfig(api=OpenAiApi.RESPONSES),
    ),
    Case(
        "gemini",
        P.GOOGLE_GEMINI,
        "gemini/thoughts_parallel_calls",
        "gemini/text_signature",
        "gemini-3-flash-preview",
        tools=(weather,),
    ),
]


async def run_case(case: Case, chunks: list[int] | None = None) -> tuple[list[Any], Any, bytes]:
    """Run the whole loop of ``case``; the items, the stream and the follow-up body."""
    replies = [Reply(transcript(case.first), chunks=chunks), Reply(transcript(case.final))]
    async with open_replay_server(replies) as server:
        base = server.url + case.base_suffix
        async with CucaClient(
            case.endpoint, base_url=base, api_key="test-key", provider_config=case.config
        ) as client:
            items: list[Any] = []
            async with client.run_tools(case.request(), case.tools, max_steps=3) as stream:
                async for item in stream:
                    items.append(item)
        assert len(server.requests) == 2
        return items, stream, server.requests[1].body
