"""Keeping what a user typed from becoming a control token.

A rendered prompt must be tokenized with special tokens parsed, or the template's own
``<|im_start|>`` turns into a dozen text tokens. But then a message that contains the
text ``<|im_end|>`` would close its turn early: prompt injection through the tokenizer.

:class:`PromptGuard` separates the two without touching the template: before
rendering, every control-token text in the request's content is swapped for a
placeholder (private-use characters around an index); after rendering, the prompt is
cut at the placeholders into segments. Template text is tokenized with special tokens
parsed; each placeholder's original text is tokenized as plain text. The template sees
the content unchanged except at those rare spots, so its filters still work.

Pure: no llama.cpp here. The caller supplies the control-token texts of the vocabulary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs

from cuca.types import (
    Block,
    Text,
    Thinking,
    ToolCall,
    ToolDefinition,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

__all__ = ["PromptGuard", "PromptPart"]

_OPEN, _CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
_T = TypeVar("_T")


@attrs.frozen
class PromptPart:
    """A piece of the prompt and whether its control-token text is parsed as such."""

    text: str
    special: bool


class PromptGuard:
    """Marks the control-token text in a request's content so it stays plain text.

    ``control_texts`` are the texts of the vocabulary's control tokens (the ones the
    tokenizer only recognises when told to parse special tokens).
    """

    def __init__(self, control_texts: Iterable[str]) -> None:
        # The placeholder characters themselves are escaped too, so any content
        # round-trips exactly and a forged placeholder stays text.
        self._literals = sorted({t for t in control_texts if t} | {_OPEN, _CLOSE}, key=len)
        self._literals.reverse()  # longest first, so a longer token wins over its prefix
        self._index = {text: i for i, text in enumerate(self._literals)}
        self._pattern = re.compile("|".join(re.escape(t) for t in self._literals))

    def protect(self, request: UnifiedRequest) -> UnifiedRequest:
        """``request`` with control-token text in its content replaced by placeholders.

        Content is every string a user or a tool supplied: message text, reasoning,
        tool calls and results, names and ids, and the tool definitions.
        """
        messages = tuple(self._message(m) for m in request.messages)
        tools = tuple(self._tool(t) for t in request.tools)
        if messages == request.messages and tools == request.tools:
            return request
        return attrs.evolve(request, messages=messages, tools=tools)

    def segments(self, rendered: str) -> list[PromptPart]:
        """``rendered`` (made from a protected request) cut into tokenizer segments."""
        segments: list[PromptPart] = []
        last = 0
        for match in _PLACEHOLDER.finditer(rendered):
            index = int(match.group(1))
            if index >= len(self._literals):
                continue  # not one of ours: the template wrote it, leave it as is
            if match.start() > last:
                segments.append(PromptPart(rendered[last : match.start()], special=True))
            segments.append(PromptPart(self._literals[index], special=False))
            last = match.end()
        if last < len(rendered) or not segments:
            segments.append(PromptPart(rendered[last:], special=True))
        return _merge_plain(segments)

    def restore(self, rendered: str) -> str:
        """The prompt text itself: ``rendered`` with the placeholders put back."""
        return "".join(segment.text for segment in self.segments(rendered))

    # -- walking the request -----------------------------------------------------------

    def _text(self, text: str) -> str:
        return self._pattern.sub(self._placeholder, text)

    def _placeholder(self, match: re.Match[str]) -> str:
        return f"{_OPEN}{self._index[match.group()]}{_CLOSE}"

    def _optional(self, text: str | None) -> str | None:
        return None if text is None else self._text(text)

    def _deep(self, value: _T) -> _T:
        """Every string inside a JSON-like value, keys included, protected."""
        result: Any = value
        if isinstance(value, str):
            result = self._text(value)
        elif isinstance(value, Mapping):
            result = {self._deep(k): self._deep(v) for k, v in value.items()}
        elif isinstance(value, list | tuple):
            result = type(value)(self._deep(v) for v in value)
        return result  # type: ignore[no-any-return]

    def _message(self, message: UnifiedMessage) -> UnifiedMessage:
        content = tuple(self._block(b) for b in message.content)
        tool_call_id, name = self._optional(message.tool_call_id), self._optional(message.name)
        if (content, tool_call_id, name) == (message.content, message.tool_call_id, message.name):
            return message
        return attrs.evolve(message, content=content, tool_call_id=tool_call_id, name=name)

    def _block(self, block: Block) -> Block:
        if isinstance(block, Text | Thinking):
            return attrs.evolve(block, text=self._text(block.text))
        if isinstance(block, ToolCall):
            arguments = self._deep(dict(block.arguments))
            return attrs.evolve(
                block, id=self._text(block.id), name=self._text(block.name), arguments=arguments
            )
        if isinstance(block, ToolResult):
            return attrs.evolve(
                block, tool_call_id=self._text(block.tool_call_id), output=self._text(block.output)
            )
        return block

    def _tool(self, tool: ToolDefinition) -> ToolDefinition:
        return attrs.evolve(
            tool,
            name=self._text(tool.name),
            description=self._text(tool.description),
            input_schema=self._deep(dict(tool.input_schema)),
        )


def _merge_plain(segments: list[PromptPart]) -> list[PromptPart]:
    """Adjacent plain segments joined (``a<|im_end|>`` typed twice is one text)."""
    merged: list[PromptPart] = []
    for segment in segments:
        if merged and not segment.special and not merged[-1].special:
            merged[-1] = PromptPart(merged[-1].text + segment.text, special=False)
        else:
            merged.append(segment)
    return merged
