"""What llama.cpp's own chat renderer gives a template beyond Hugging Face's variables.

cuca renders a GGUF's template as ``llama-server --jinja`` does (the differential test
``tests/test_template_llama_server.py`` compares both on the 70-template corpus). Two
things llama.cpp adds, and so does cuca:

* variables a few templates read: ``date_string`` (Llama 3.1/3.3 print
  ``Today Date: 26 Jul 2024`` without it), ``datetime`` and ``functions``
  (FireFunction v2, which fails without them);
* for a template that has no system role (Gemma 2 raises on one), the system text folded
  into the first user turn;
* the messages reshaped for two families, as llama.cpp's handlers for them do
  (:func:`adjust_messages`): gpt-oss gets an assistant turn's reasoning as ``thinking``,
  the field its template reads (so the analysis channel of a tool-calling turn survives
  the round trip), and the older Gemma 4 templates get an assistant turn's tool results
  as its ``tool_responses``.

Pure functions over the template variables: :class:`~engine.template.ChatTemplate`
decides when they apply.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

__all__ = ["SYSTEM_PROBE", "adjust_messages", "extra_variables", "fold_system", "message_adjuster"]

SYSTEM_PROBE = "<cuca system role probe>"
"""The system text whose presence in a rendering shows that a template has a system role
(llama.cpp's own test: render ``[system, user]`` and look for the system text)."""


def extra_variables(
    reads: Callable[[str], bool], now: datetime, tools: list[Any] | None
) -> dict[str, Any]:
    """The variables llama.cpp passes that the template reads.

    ``date_string`` is today as ``30 Nov 2026``; ``datetime`` is ``Nov 30 2026``;
    ``functions`` is the declared tools as indented JSON, ``""`` without tools.
    """
    extras: dict[str, Any] = {}
    if reads("date_string"):
        extras["date_string"] = now.strftime("%d %b %Y")
    if reads("datetime"):
        extras["datetime"] = now.strftime("%b %d %Y")
    if reads("functions"):
        extras["functions"] = json.dumps(tools, indent=2, ensure_ascii=False) if tools else ""
    return extras


def fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every system message folded into the user turn that follows it.

    The system texts (joined with newlines) open that user message's content, followed
    by a newline and the user's own text. System text with no user message after it,
    or before an assistant or tool turn, becomes a user message of its own.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        if message["role"] == "system":
            pending.append(str(message["content"]))
            continue
        if pending and message["role"] == "user":
            content = str(message["content"])
            message = {**message, "content": "\n".join([*pending, content] if content else pending)}
        elif pending:
            out.append({"role": "user", "content": "\n".join(pending)})
        pending = []
        out.append(message)
    if pending:
        out.append({"role": "user", "content": "\n".join(pending)})
    return out


MessageAdjuster = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def message_adjuster(source: str) -> MessageAdjuster | None:
    """How llama.cpp reshapes the messages for the template ``source``, found as its
    ``common_chat_try_specialized_template`` finds the family; ``None`` for the others."""
    if "<|channel|>" in source:  # gpt-oss
        return gpt_oss_messages
    if "'<|tool_call>call:'" in source and "{#- OpenAI Chat Completions:" not in source:
        return gemma4_messages  # the older Gemma 4 templates, which read tool_responses
    return None


def adjust_messages(source: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as llama.cpp hands them to the template ``source``."""
    adjuster = message_adjuster(source)
    return messages if adjuster is None else adjuster(messages)


def gpt_oss_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gpt-oss's template reads an assistant turn's reasoning from ``thinking``: each
    ``reasoning_content`` is copied there, and a turn that also calls tools loses its
    ``content`` (llama.cpp's ``common_chat_params_init_gpt_oss``)."""
    out = []
    for message in messages:
        if isinstance(message.get("reasoning_content"), str):
            message = {**message, "thinking": message["reasoning_content"]}
            if message.get("tool_calls"):
                message.pop("content", None)
        out.append(message)
    return out


def gemma4_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant turn with tool calls, the tool results after it and a final answer
    without calls become one assistant message holding ``tool_calls``,
    ``tool_responses`` (``{"name", "response"}``, the result parsed when it is JSON; the
    name is the matching call's, else the result's call id), the answer's ``content``
    and the turn's ``reasoning_content`` (llama.cpp's ``convert_tool_responses_gemma4``
    for the Gemma 4 templates that read ``tool_responses``)."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            out.append(message)
            i += 1
            continue
        calls = list(message["tool_calls"])
        turn: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
        responses: list[dict[str, Any]] = []
        i += 1
        while i < len(messages) and messages[i].get("role") == "tool":
            result = messages[i]
            name = ""
            if len(responses) < len(calls):
                name = str(calls[len(responses)].get("function", {}).get("name", ""))
            responses.append(
                {"name": name or result.get("tool_call_id", ""), "response": _parsed(result)}
            )
            i += 1
        if i < len(messages) and messages[i].get("role") == "assistant":
            following = messages[i]
            if not following.get("tool_calls") and following.get("content"):
                turn["content"] = following["content"]
                i += 1
        if responses:
            turn["tool_responses"] = responses
        if isinstance(message.get("reasoning_content"), str):
            turn["reasoning_content"] = message["reasoning_content"]
        out.append(turn)
    return out


def _parsed(result: dict[str, Any]) -> Any:
    content = result.get("content")
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content
