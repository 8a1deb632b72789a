"""Small, well-formed replies of each HTTP family, built from what a test needs: a turn
that calls one tool with given arguments, or one that answers with given text (in as
many deltas as given). The shapes follow the recorded transcripts of
``tests/transcripts/`` (minimal: only the events the decoders read).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from cuca import CucaClient, CucaPlugin, ProviderEndpoint
from cuca.providers.chat.config import OpenAiApi, OpenAiConfig
from cuca.providers.llamacpp.encode import LlamaCppConfig, LlamaRoute
from cuca.testing import Reply


def _sse(events: Sequence[tuple[str | None, Any]], done: bool = False) -> bytes:
    lines = []
    for event, data in events:
        head = f"event: {event}\n" if event else ""
        lines.append(f"{head}data: {json.dumps(data)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


# -- OpenAI chat completions ------------------------------------------------------------


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}


def _chat_usage() -> dict[str, Any]:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}


def chat_call(name: str, arguments: Mapping[str, Any], call_id: str) -> bytes:
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    chunks = [
        _chat_chunk({"role": "assistant", "tool_calls": [call]}),
        _chat_chunk({}, "tool_calls"),
        _chat_usage(),
    ]
    return _sse([(None, c) for c in chunks], done=True)


def chat_text(*pieces: str) -> bytes:
    chunks = [_chat_chunk({"role": "assistant", "content": ""})]
    chunks += [_chat_chunk({"content": piece}) for piece in pieces]
    chunks += [_chat_chunk({}, "stop"), _chat_usage()]
    return _sse([(None, c) for c in chunks], done=True)


# -- OpenAI Responses -------------------------------------------------------------------


def _completed(output: list[dict[str, Any]]) -> tuple[str, Any]:
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    response = {"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5",
                "output": output, "usage": usage}
    return "response.completed", {"type": "response.completed", "response": response}


def responses_call(name: str, arguments: Mapping[str, Any], call_id: str) -> bytes:
    text = json.dumps(arguments)
    item = {"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": "",
            "call_id": call_id, "name": name}
    done = {**item, "status": "completed", "arguments": text}
    events: list[tuple[str | None, Any]] = [
        ("response.output_item.added",
         {"type": "response.output_item.added", "output_index": 0, "item": item}),
        ("response.function_call_arguments.delta",
         {"type": "response.function_call_arguments.delta", "item_id": "fc_1",
          "output_index": 0, "delta": text}),
        ("response.function_call_arguments.done",
         {"type": "response.function_call_arguments.done", "item_id": "fc_1",
          "output_index": 0, "arguments": text}),
        ("response.output_item.done",
         {"type": "response.output_item.done", "output_index": 0, "item": done}),
        _completed([done]),
    ]
    return _sse(events)


def responses_text(*pieces: str) -> bytes:
    item = {"id": "msg_1", "type": "message", "status": "in_progress", "content": [],
            "role": "assistant"}
    part = {"type": "output_text", "annotations": [], "text": ""}
    whole = "".join(pieces)
    done = {**item, "status": "completed", "content": [{**part, "text": whole}]}
    events: list[tuple[str | None, Any]] = [
        ("response.output_item.added",
         {"type": "response.output_item.added", "output_index": 0, "item": item}),
        ("response.content_part.added",
         {"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0,
          "content_index": 0, "part": part}),
    ]
    events += [
        ("response.output_text.delta",
         {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
          "content_index": 0, "delta": piece})
        for piece in pieces
    ]
    events += [
        ("response.output_text.done",
         {"type": "response.output_text.done", "item_id": "msg_1", "output_index": 0,
          "content_index": 0, "text": whole}),
        ("response.output_item.done",
         {"type": "response.output_item.done", "output_index": 0, "item": done}),
        _completed([done]),
    ]
    return _sse(events)


# -- Anthropic Messages -----------------------------------------------------------------


def _anthropic(blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]], stop: str) -> bytes:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
               "content": [], "stop_reason": None,
               "usage": {"input_tokens": 10, "output_tokens": 1}}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": message})
    ]
    for index, (start, deltas) in enumerate(blocks):
        events.append(("content_block_start",
                       {"type": "content_block_start", "index": index, "content_block": start}))
        events += [("content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(events)


def anthropic_call(name: str, arguments: Mapping[str, Any], call_id: str) -> bytes:
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
    return _anthropic([(start, [delta])], "tool_use")


def anthropic_text(*pieces: str) -> bytes:
    deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
    return _anthropic([({"type": "text", "text": ""}, deltas)], "end_turn")


# -- Gemini -----------------------------------------------------------------------------


def _gemini(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini"}


def gemini_call(name: str, arguments: Mapping[str, Any], call_id: str) -> bytes:
    part = {"functionCall": {"name": name, "args": dict(arguments)}}
    return _sse([(None, _gemini([part], "STOP"))])


def gemini_text(*pieces: str) -> bytes:
    frames = [_gemini([{"text": piece}], None) for piece in pieces]
    frames.append(_gemini([{"text": ""}], "STOP"))
    return _sse([(None, frame) for frame in frames])


# -- llama.cpp /completion (no tool protocol: text only) -------------------------------


def completion_text(*pieces: str) -> bytes:
    frames: list[tuple[str | None, Any]] = [
        (None, {"index": 0, "content": piece, "stop": False}) for piece in pieces
    ]
    frames.append((None, {"index": 0, "content": "", "stop": True, "tokens_predicted": 5,
                          "tokens_evaluated": 10}))
    return _sse(frames)


def _no_call(name: str, arguments: Mapping[str, Any], call_id: str) -> bytes:
    raise AssertionError("llama.cpp's /completion route has no tool protocol")


# -- the families -----------------------------------------------------------------------


@attrs.frozen
class Family:
    """One HTTP family: how to make a client of it and its two kinds of reply."""

    name: str
    endpoint: ProviderEndpoint
    call: Callable[[str, Mapping[str, Any], str], bytes]
    text: Callable[..., bytes]
    suffix: str = ""
    config: Any = None

    def client(self, url: str, plugins: Sequence[CucaPlugin] = ()) -> CucaClient:
        return CucaClient(
            self.endpoint,
            base_url=url + self.suffix,
            api_key="k",
            provider_config=self.config,
            plugins=plugins,
        )

    def call_reply(self, name: str, arguments: Mapping[str, Any], call_id: str = "call_1") -> Reply:
        return Reply(self.call(name, arguments, call_id))

    def text_reply(self, *pieces: str) -> Reply:
        return Reply(self.text(*pieces))


FAMILIES = [
    Family("openai_chat", ProviderEndpoint.OPENAI, chat_call, chat_text),
    Family(
        "openai_responses",
        ProviderEndpoint.OPENAI,
        responses_call,
        responses_text,
        config=OpenAiConfig(api=OpenAiApi.RESPONSES),
    ),
    Family("anthropic", ProviderEndpoint.ANTHROPIC, anthropic_call, anthropic_text),
    Family("gemini", ProviderEndpoint.GOOGLE_GEMINI, gemini_call, gemini_text),
]

COMPLETION = Family(
    "llama_cpp_completion",
    ProviderEndpoint.LLAMA_CPP,
    _no_call,
    completion_text,
    config=LlamaCppConfig(route=LlamaRoute.COMPLETION),
)
TEXT_FAMILIES = [*FAMILIES, COMPLETION]
"""Every HTTP family, for what needs no tool call (structured answers)."""
