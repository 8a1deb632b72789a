"""What the model reads of an MCP tool result (``cuca.mcp.content``), without a server.

docs/mcp.md, "What the model reads": each block a line, ``structuredContent`` as its JSON
after them unless a text block already is that JSON, images and blobs by type and size.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import mcp_types as types

from cuca.mcp.content import result_text


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def image(data: str, mime: str = "image/png") -> types.ImageContent:
    return types.ImageContent(type="image", data=data, mime_type=mime)


def blob(data: str, mime: str | None = None) -> types.EmbeddedResource:
    resource = types.BlobResourceContents(uri="file:///b.bin", blob=data, mime_type=mime)
    return types.EmbeddedResource(type="resource", resource=resource)


def read(*content: Any, structured: dict[str, Any] | None = None) -> str:
    return result_text(types.CallToolResult(content=list(content), structured_content=structured))


def test_mcp_content_texts_one_per_line() -> None:
    assert read(text("first"), text("second")) == "first\nsecond"
    assert read() == ""


def test_mcp_content_image_and_audio_by_type_and_decoded_size() -> None:
    assert read(image("AAECAw==")) == "[image: image/png, 4 bytes]"
    assert read(image("AAECAwQ=", "image/gif")) == "[image: image/gif, 5 bytes]"
    assert read(image("AAECAwQF")) == "[image: image/png, 6 bytes]"
    audio = types.AudioContent(type="audio", data="AAECAwQFBg==", mime_type="audio/wav")
    assert read(audio) == "[audio: audio/wav, 7 bytes]"


def test_mcp_content_size_of_base64_split_into_lines() -> None:
    assert read(image("AAEC\r\nAwQF\r\n")) == "[image: image/png, 6 bytes]"
    assert read(image("AAEC\nAw==\n")) == "[image: image/png, 4 bytes]"
    assert read(image("AAECAwQ=\r\n")) == "[image: image/png, 5 bytes]"


def test_mcp_content_blob_without_a_mime_type_is_octet_stream() -> None:
    assert read(blob("AAECAw==")) == "[resource: file:///b.bin, application/octet-stream, 4 bytes]"
    assert read(blob("AAECAw==", "x/y")) == "[resource: file:///b.bin, x/y, 4 bytes]"


def test_mcp_content_structured_json_keeps_its_characters() -> None:
    assert read(structured={"city": "Zürich"}) == '{"city": "Zürich"}'
    assert read(text("done"), structured={"ok": True}) == 'done\n{"ok": true}'


def test_mcp_content_structured_found_in_any_text_block() -> None:
    said = read(text("see below"), text('{"a": 1}'), structured={"a": 1})
    assert said == 'see below\n{"a": 1}'
    after_an_image = read(image("AAECAw=="), text('{"a": 1}'), structured={"a": 1})
    assert after_an_image == '[image: image/png, 4 bytes]\n{"a": 1}'


def test_mcp_content_block_of_an_unknown_type_is_named() -> None:
    future = SimpleNamespace(type="video", data="...")
    result = types.CallToolResult.model_construct(content=[future], structured_content=None)
    assert result_text(result) == "[video content]"
    untyped = types.CallToolResult.model_construct(content=[object()], structured_content=None)
    assert result_text(untyped) == "[object content]"
