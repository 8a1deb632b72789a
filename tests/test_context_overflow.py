"""Each vendor's "the prompt does not fit" answer raises ContextOverflowError.

The bodies are the vendors' own, as their docs and their users' bug reports show them
(OpenAI's ``context_length_exceeded``, vLLM's ``maximum context length``, Anthropic's
``prompt is too long``, Gemini's token-count 400, DeepSeek's OpenAI-shaped 400). They
go through the replay server on loopback, so the mapping is tested at the adapter's
error boundary, the way a turn meets it. llama-server's is tested against the real
server in ``test_context_llama_server.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cuca import (
    ContextOverflowError,
    CucaClient,
    HttpContextOverflowError,
    HttpStatusError,
    ProviderEndpoint,
    UnifiedRequest,
)
from cuca.providers.anthropic.overflow import anthropic_overflow
from cuca.providers.chat.overflow import chat_overflow
from cuca.providers.decoding import Overflow
from cuca.testing import Reply, open_replay_server

REQUEST = UnifiedRequest.new("some-model").add_user_message("A very long story...")
JSON = [("content-type", "application/json")]


async def overflow_of(provider: ProviderEndpoint, body: Any, status: int = 400) -> Any:
    """The error a turn raises when the server answers ``status`` with ``body``."""
    reply = Reply(json.dumps(body).encode(), status=status, headers=JSON)
    async with open_replay_server(reply) as server:
        async with CucaClient(provider, base_url=server.url, api_key="k") as client:
            with pytest.raises(HttpStatusError) as info:
                await client.generate(REQUEST)
    return info.value


async def test_overflow_openai_context_length_exceeded() -> None:
    body = {
        "error": {
            "message": "This model's maximum context length is 128000 tokens. However, your "
            "messages resulted in 130532 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    error = await overflow_of(ProviderEndpoint.OPENAI, body)
    assert isinstance(error, HttpContextOverflowError)
    assert isinstance(error, ContextOverflowError)
    assert (error.status, error.limit, error.requested) == (400, 128000, 130532)
    assert str(error).startswith("http status 400: context overflow: This model's maximum")


async def test_overflow_openai_code_without_numbers() -> None:
    # the Responses API's wording: the code says it, no number does
    body = {
        "error": {
            "message": "Your input exceeds the context window of this model. Please adjust "
            "your input and try again.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    }
    error = await overflow_of(ProviderEndpoint.OPENAI, body)
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.requested) == (None, None)


async def test_overflow_vllm_maximum_context_length() -> None:
    body = {
        "object": "error",
        "message": "This model's maximum context length is 4096 tokens. However, you requested "
        "4257 tokens (257 in the messages, 4000 in the completion). Please reduce the length "
        "of the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    error = await overflow_of(ProviderEndpoint.VLLM, body)
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.requested) == (4096, 4257)


def test_overflow_vllm_max_tokens_too_large_adds_prompt_and_output() -> None:
    message = (
        "'max_tokens' or 'max_completion_tokens' is too large: 4000. This model's maximum "
        "context length is 4096 tokens and your request has 257 input tokens "
        "(4000 > 4096 - 257)."
    )
    body = json.dumps({"error": {"message": message, "type": "BadRequestError", "code": 400}})
    assert chat_overflow(400, body) == Overflow(4096, 4257)


async def test_overflow_deepseek_maximum_context_length() -> None:
    body = {
        "error": {
            "message": "This model's maximum context length is 131072 tokens. However, you "
            "requested 140512 tokens (140512 in the messages, 0 in the completion). Please "
            "reduce the length of the messages or completion.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }
    error = await overflow_of(ProviderEndpoint.DEEPSEEK, body)
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.requested) == (131072, 140512)


async def test_overflow_anthropic_prompt_is_too_long() -> None:
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 208310 tokens > 200000 maximum",
        },
    }
    error = await overflow_of(ProviderEndpoint.ANTHROPIC, body)
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.requested) == (200000, 208310)
    assert error.message == "prompt is too long: 208310 tokens > 200000 maximum"


def test_overflow_anthropic_input_plus_max_tokens() -> None:
    message = (
        "input length and `max_tokens` exceed context limit: 197779 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again"
    )
    body = json.dumps(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )
    assert anthropic_overflow(400, body) == Overflow(200000, 219112)


async def test_overflow_gemini_input_token_count() -> None:
    text = "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."
    body = [
        {
            "error": {
                "code": 400,
                "message": text,
                "errors": [{"message": text, "domain": "global", "reason": "badRequest"}],
                "status": "INVALID_ARGUMENT",
            }
        }
    ]
    error = await overflow_of(ProviderEndpoint.GOOGLE_GEMINI, body)
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.requested) == (1048576, 1200293)


async def test_overflow_other_400_stays_a_plain_status_error() -> None:
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "max_tokens: 10000 > 4096, which is the maximum allowed number of "
            "output tokens for claude-3-5-sonnet-20240620",
        },
    }
    error = await overflow_of(ProviderEndpoint.ANTHROPIC, body)
    assert type(error) is HttpStatusError
    assert not isinstance(error, ContextOverflowError)
