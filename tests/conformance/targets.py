"""The providers under conformance test: how to reach each one and what it sends.

A :class:`Target` knows its endpoint, its clean transcripts (``tests/transcripts/``),
the shape of its HTTP error bodies and how to frame a tool call whose raw arguments we
choose. Everything else in the suite is generic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from support.transcripts import decode_chunks, transcript

from cuca import CucaClient, OpenAiApi, OpenAiConfig, ProviderEndpoint
from cuca.errors import CucaError, ToolCallError
from cuca.providers.base import ClientSettings, Item, ProviderAdapter
from cuca.providers.llamacpp.encode import LlamaCppConfig, LlamaRoute
from cuca.providers.registry import adapter_for
from cuca.testing.conformance import ANY_ID, Transcript
from cuca.types import ToolCall, UnifiedRequest


@attrs.frozen
class Target:
    name: str
    endpoint: ProviderEndpoint
    transcripts: Sequence[str]
    error_body: Callable[[int, str], bytes]
    tool_frames: Callable[[str], bytes] | None
    suffix: str = ""
    api_key: str | None = "sk-conformance-secret-0123456789"
    provider_config: Any = None
    #: True when EOF before the provider's end marker is an error (no end marker: False)
    strict_end: bool = True

    def base_url(self, server_url: str) -> str:
        return server_url + self.suffix

    def adapter(self, server_url: str = "http://127.0.0.1:9") -> ProviderAdapter:
        settings = ClientSettings(
            self.endpoint, self.base_url(server_url), self.api_key, self.provider_config
        )
        return adapter_for(settings)

    def client(self, server_url: str, **options: Any) -> CucaClient:
        """A client for this target pointed at a replay server."""
        return CucaClient(
            self.endpoint,
            base_url=self.base_url(server_url),
            api_key=options.pop("api_key", self.api_key),
            provider_config=self.provider_config,
            **options,
        )

    def request(self) -> UnifiedRequest:
        return UnifiedRequest.new("conformance-model").add_user_message("hi").set_max_tokens(64)

    def transcript(self, name: str) -> bytes:
        return transcript(name)

    def kit_transcripts(self) -> list[Transcript]:
        """The transcripts with the blocks they decode to, for the public conformance kit.

        The expected blocks come from feeding the whole transcript to the adapter's framer
        and decoder in process (pinned to hand-written expectations by the provider tests);
        the kit checks that every path over HTTP, under every fault, agrees with them.
        """
        kit = []
        for name in self.transcripts:
            items, _ = decode(self, [self.transcript(name)])
            blocks = [_any_id(item) for item in items if not isinstance(item, CucaError)]
            kit.append(Transcript(name, self.transcript(name), blocks))
        return kit

    def kit_options(self) -> dict[str, Any]:
        """How `check_adapter` reaches this target on the replay server."""
        return {
            "path": self.suffix,
            "api_key": self.api_key,
            "provider_config": self.provider_config,
            "end_marker": self.strict_end,
            "error_body": self.error_body,
        }


def openai_error(status: int, message: str) -> bytes:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return json.dumps(body).encode()


def anthropic_error(status: int, message: str) -> bytes:
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": message}}
    return json.dumps(body).encode()


def gemini_error(status: int, message: str) -> bytes:
    body = {"error": {"code": status, "message": message, "status": "RESOURCE_EXHAUSTED"}}
    return json.dumps(body, indent=2).encode()


def openai_tool_frames(arguments: str) -> bytes:
    first = {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                        }
                    ]
                },
            }
        ]
    }
    args = {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "function": {"arguments": arguments},
                        }
                    ]
                },
            }
        ]
    }
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    frames = [json.dumps(first), json.dumps(args), json.dumps(finish), "[DONE]"]
    return b"".join(f"data: {f}\n\n".encode() for f in frames)


def anthropic_tool_frames(arguments: str) -> bytes:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "m",
                    "usage": {"input_tokens": 3, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": arguments},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def responses_tool_frames(arguments: str) -> bytes:
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f"}
    events = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**call, "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": arguments},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "arguments": arguments,
        },
        {"type": "response.completed", "response": {"status": "completed", "usage": None}},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def gemini_tool_frames(arguments: str) -> bytes:
    frame = (
        '{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":'
        + arguments
        + '}}],"role":"model"},"finishReason":"STOP","index":0}]}'
    )
    return f"data: {frame}\r\n\r\n".encode()


RESPONSES = OpenAiConfig(api=OpenAiApi.RESPONSES)
OPENAI_TEXT = ["openai/text", "openai/tool_call", "openai/parallel_tool_calls"]

TARGETS = [
    Target(
        "openai",
        ProviderEndpoint.OPENAI,
        OPENAI_TEXT,
        openai_error,
        openai_tool_frames,
        suffix="/v1",
    ),
    Target(
        "vllm",
        ProviderEndpoint.VLLM,
        ["vllm/reasoning_both_fields", "vllm/reasoning_tool_call"],
        openai_error,
        openai_tool_frames,
        suffix="/v1",
        api_key=None,
    ),
    Target(
        "lm_studio",
        ProviderEndpoint.LM_STUDIO,
        ["lm_studio/reasoning", "lm_studio/gpt_oss_tool_call"],
        openai_error,
        openai_tool_frames,
        suffix="/v1",
        api_key=None,
    ),
    Target(
        "deepseek",
        ProviderEndpoint.DEEPSEEK,
        ["deepseek/reasoner", "deepseek/tool_call"],
        openai_error,
        openai_tool_frames,
        suffix="/v1",
    ),
    Target(
        "llama_cpp_chat",
        ProviderEndpoint.LLAMA_CPP,
        ["llama_cpp/chat_tool_call", "llama_cpp/chat_whole_tool_calls"],
        openai_error,
        openai_tool_frames,
        api_key=None,
    ),
    Target(
        "llama_cpp_completion",
        ProviderEndpoint.LLAMA_CPP,
        ["llama_cpp/completion"],
        openai_error,
        None,
        api_key=None,
        provider_config=LlamaCppConfig(route=LlamaRoute.COMPLETION),
        strict_end=False,
    ),
    Target(
        "openai_responses",
        ProviderEndpoint.OPENAI,
        [
            "openai_responses/text",
            "openai_responses/reasoning_two_tools",
            "openai_responses/final_answer",
            "openai_responses/incomplete",
        ],
        openai_error,
        responses_tool_frames,
        suffix="/v1",
        provider_config=RESPONSES,
    ),
    Target(
        "vllm_responses",
        ProviderEndpoint.VLLM,
        ["vllm_responses/reasoning_tool_call"],
        openai_error,
        responses_tool_frames,
        suffix="/v1",
        api_key=None,
        provider_config=RESPONSES,
    ),
    Target(
        "lm_studio_responses",
        ProviderEndpoint.LM_STUDIO,
        ["lm_studio_responses/reasoning"],
        openai_error,
        responses_tool_frames,
        suffix="/v1",
        api_key=None,
        provider_config=RESPONSES,
    ),
    Target(
        "llama_cpp_responses",
        ProviderEndpoint.LLAMA_CPP,
        ["llama_cpp_responses/text"],
        openai_error,
        responses_tool_frames,
        api_key=None,
        provider_config=RESPONSES,
    ),
    Target(
        "anthropic",
        ProviderEndpoint.ANTHROPIC,
        [
            "anthropic/text",
            "anthropic/thinking",
            "anthropic/redacted_thinking",
            "anthropic/thinking_two_tools",
            "anthropic/tool_use",
            "anthropic/cache_usage",
        ],
        anthropic_error,
        anthropic_tool_frames,
    ),
    Target(
        "deepseek_bridge",
        ProviderEndpoint.DEEPSEEK,
        ["anthropic/deepseek_bridge"],
        anthropic_error,
        anthropic_tool_frames,
        suffix="/anthropic",
    ),
    Target(
        "gemini",
        ProviderEndpoint.GOOGLE_GEMINI,
        [
            "gemini/text_signature",
            "gemini/tool_call",
            "gemini/thoughts_parallel_calls",
            "gemini/usage_only_final",
            "gemini/function_call_with_id",
        ],
        gemini_error,
        gemini_tool_frames,
        strict_end=False,
    ),
]

BY_NAME = {target.name: target for target in TARGETS}


def decode(target: Target, chunks: Sequence[bytes]) -> tuple[list[Item], Exception | None]:
    """Run ``chunks`` through the target's framer and decoder, as the pipeline does:
    stop at the end marker, close at end of stream; return the items and the error."""
    adapter = target.adapter()
    decoder = adapter.new_decoder(target.request())
    run = decode_chunks(decoder, chunks, framer=adapter.new_framer(), catch=Exception)
    return normalized(run.items), run.error


SYNTHETIC_ID = re.compile(r"call_[0-9a-f]{16}")


def normalized(items: list[Item]) -> list[Item]:
    """Items with made-up tool call ids (``call_`` + 16 hex, random) replaced by a fixed
    one, so that two decodings of the same bytes compare equal: a ToolCall's ``id``, and
    a ToolCallError's ``tool_call_id`` (a malformed call that arrived without an id)."""
    return [_fixed_id(item) for item in items]


def _fixed_id(item: Item) -> Item:
    if isinstance(item, ToolCall) and SYNTHETIC_ID.fullmatch(item.id):
        return attrs.evolve(item, id="call_<synthetic>")
    if isinstance(item, ToolCallError) and SYNTHETIC_ID.fullmatch(item.tool_call_id or ""):
        return ToolCallError(
            item.provider,
            item.message,
            tool_call_id="call_<synthetic>",
            name=item.name,
            raw=item.raw,
        )
    return item


def _any_id(item: Item) -> Item:
    """A made-up tool call id (see `normalized`) matches any id in the kit."""
    if isinstance(item, ToolCall) and item.id == "call_<synthetic>":
        return attrs.evolve(item, id=ANY_ID)
    return item
