"""How many input tokens a request will cost, before it is sent.

Until the client can count a request's tokens exactly (issue 24's ``count_tokens``),
the estimate is the request's text length divided by 4 (rounded up): the usual rule of
thumb for English with the vendors' tokenizers. The limiter and the budget correct it
with the turn's exact usage when the turn ends.
"""

from __future__ import annotations

import json

from cuca.types import ImageBase64, Text, Thinking, ToolCall, ToolResult, UnifiedRequest

__all__ = ["estimate_input_tokens"]

CHARS_PER_TOKEN = 4


def estimate_input_tokens(request: UnifiedRequest) -> int:
    """The estimated prompt tokens of ``request``: its text (messages, tool calls and
    results, tool definitions) over :data:`CHARS_PER_TOKEN`."""
    chars = 0
    for message in request.messages:
        for block in message.content:
            if isinstance(block, Text | Thinking):
                chars += len(block.text)
            elif isinstance(block, ToolResult):
                chars += len(block.output)
            elif isinstance(block, ToolCall):
                chars += len(block.name) + len(json.dumps(dict(block.arguments)))
            elif isinstance(block, ImageBase64):
                chars += 1000 * CHARS_PER_TOKEN  # a typical image's cost, roughly
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description) + len(json.dumps(dict(tool.input_schema)))
    return -(-chars // CHARS_PER_TOKEN)
