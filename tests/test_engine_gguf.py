"""The pure-Python GGUF metadata reader, on the SmolLM2 test model and on broken files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from support.corpus import smollm2_gguf_path

from cuca.engine.gguf import read_metadata
from cuca.errors import ConfigurationError


def gguf_bytes(pairs: list[tuple[str, int, bytes]], *, version: int = 3) -> bytes:
    """A minimal little-endian GGUF header with the given (key, type id, raw value) pairs."""
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(pairs))
    for key, type_id, raw in pairs:
        name = key.encode()
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", type_id) + raw
    return out


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def test_gguf_smollm2_metadata() -> None:
    metadata = read_metadata(smollm2_gguf_path())
    assert metadata["general.architecture"] == "llama"
    assert metadata["llama.context_length"] == 8192
    assert metadata["tokenizer.ggml.bos_token_id"] == 1
    assert metadata["tokenizer.ggml.eos_token_id"] == 2
    assert metadata["tokenizer.ggml.add_bos_token"] is False
    assert metadata["tokenizer.chat_template"].startswith("{% for message in messages %}")
    tokens = metadata["tokenizer.ggml.tokens"]
    assert len(tokens) == 49152
    assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert metadata["tokenizer.ggml.token_type"][:3] == [3, 3, 3]


def test_gguf_scalar_string_and_nested_array_types(tmp_path: Path) -> None:
    nested = struct.pack("<IQ", 9, 2)  # an array of two arrays of uint8
    nested += struct.pack("<IQ", 0, 2) + bytes([1, 2]) + struct.pack("<IQ", 0, 0)
    pairs = [
        ("a.u8", 0, struct.pack("<B", 7)),
        ("a.i16", 3, struct.pack("<h", -2)),
        ("a.f32", 6, struct.pack("<f", 0.5)),
        ("a.bool", 7, struct.pack("<?", True)),
        ("a.str", 8, gguf_string("héllo")),
        ("a.i64", 11, struct.pack("<q", -(2**40))),
        ("a.f64", 12, struct.pack("<d", 1.25)),
        ("a.strs", 9, struct.pack("<IQ", 8, 2) + gguf_string("x") + gguf_string("")),
        ("a.nested", 9, nested),
    ]
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(pairs))
    assert read_metadata(path) == {
        "a.u8": 7,
        "a.i16": -2,
        "a.f32": 0.5,
        "a.bool": True,
        "a.str": "héllo",
        "a.i64": -(2**40),
        "a.f64": 1.25,
        "a.strs": ["x", ""],
        "a.nested": [[1, 2], []],
    }


def test_gguf_big_endian_file(tmp_path: Path) -> None:
    data = b"GGUF" + struct.pack(">IQQ", 3, 0, 1)
    data += struct.pack(">Q", 1) + b"k" + struct.pack(">I", 4) + struct.pack(">I", 5)
    path = tmp_path / "be.gguf"
    path.write_bytes(data)
    assert read_metadata(path) == {"k": 5}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a GGUF file"),
        (b"PK\x03\x04" + bytes(40), "no GGUF magic"),
        (b"GGUF" + struct.pack("<IQQ", 99, 0, 0), "unsupported GGUF version"),
        (gguf_bytes([("k", 8, struct.pack("<Q", 2**40) + b"x")]), "overruns the file"),
        (gguf_bytes([("k", 9, struct.pack("<IQ", 4, 2**40))]), "overruns the file"),
        (gguf_bytes([("k", 13, b"")]), "unknown value type 13"),
        (gguf_bytes([("k", 4, b"")]), "truncated"),
    ],
)
def test_gguf_rejects_broken_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ConfigurationError, match=message):
        read_metadata(path)


def test_gguf_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        read_metadata(tmp_path / "nope.gguf")
