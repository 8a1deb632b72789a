"""An MCP tool result as the text a model reads (I/O-free).

A ``tools/call`` result holds content blocks, perhaps ``structuredContent``, and an
``isError`` flag. cuca's tool results are text, so each block becomes a line:

| block | text |
|---|---|
| text | the text |
| image, audio | ``[image: image/png, 68 bytes]`` (its type and decoded size) |
| embedded resource | its text, or ``[resource: <uri>, <mime type>, N bytes]`` for a blob |
| resource link | ``[resource link: <name> <uri>]`` |

``structuredContent`` is sent as its JSON, after the blocks, unless a text block
already holds it (the spec asks servers to repeat it as a text block: a text that parses
as the same JSON value is not said twice; a text that only points at it, "see the
structured content", is not the value).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

__all__ = ["result_text"]


def result_text(result: types.CallToolResult) -> str:
    """The text the model reads for ``result`` (``isError`` is the caller's to read)."""
    lines = [_block_text(block) for block in result.content]
    structured = result.structured_content
    if structured is not None and not _holds(result.content, structured):
        lines.append(json.dumps(structured, ensure_ascii=False))
    return "\n".join(lines)


def _holds(content: list[Any], value: object) -> bool:
    """Whether a text block of ``content`` is ``value`` written as JSON."""
    for block in content:
        if isinstance(block, types.TextContent):
            try:
                if json.loads(block.text) == value:
                    return True
            except ValueError:
                continue
    return False


def _block_text(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type}: {block.mime_type}, {_size(block.data)} bytes]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        mime = resource.mime_type or "application/octet-stream"
        return f"[resource: {resource.uri}, {mime}, {_size(resource.blob)} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.name} {block.uri}]"
    return f"[{getattr(block, 'type', type(block).__name__)} content]"


def _size(data: str) -> int:
    """The decoded size of base64 ``data``, counted without decoding it: line breaks
    are not data, and ``=`` is only ever the final padding."""
    length = len(data) - data.count("\n") - data.count("\r")
    return length * 3 // 4 - data.count("=")
