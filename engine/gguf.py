"""Read the metadata of a GGUF file without loading the model.

A GGUF file starts with a header (magic ``GGUF``, version, tensor count, key/value
count) followed by typed key/value pairs, then the tensor infos and the tensor data.
:func:`read_metadata` parses the header and the key/value pairs only, so the model
loader can learn ``general.architecture``, ``<arch>.context_length``,
``tokenizer.chat_template`` and the special token ids before it spends memory on the
weights. The file is untrusted: every length is checked against the file size, and any
inconsistency is a :class:`~cuca.errors.ConfigurationError`.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any

from cuca.errors import ConfigurationError

__all__ = ["byte_order", "read_metadata"]

_MAGIC = b"GGUF"
_MAX_DEPTH = 4  # arrays of arrays nest at most this deep

# value type id -> struct format of one scalar (strings and arrays are handled apart)
_SCALARS: dict[int, str] = {
    0: "B",  # uint8
    1: "b",  # int8
    2: "H",  # uint16
    3: "h",  # int16
    4: "I",  # uint32
    5: "i",  # int32
    6: "f",  # float32
    7: "?",  # bool
    10: "Q",  # uint64
    11: "q",  # int64
    12: "d",  # float64
}
_STRING = 8
_ARRAY = 9


class _Reader:
    """A bounds-checked cursor over the file's bytes."""

    def __init__(self, data: mmap.mmap | bytes, order: str, path: str) -> None:
        self.data = data
        self.order = order
        self.pos = 0
        self.path = path

    def fail(self, what: str) -> ConfigurationError:
        return ConfigurationError(f"{self.path} is not a valid GGUF file: {what}")

    def unpack(self, fmt: str, *, many: bool = False) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise self.fail(f"truncated at byte {self.pos}")
        values = struct.unpack_from(self.order + fmt, self.data, self.pos)
        self.pos += size
        return values if many else values[0]

    def string(self) -> str:
        length = self.unpack("Q")
        if length > len(self.data) - self.pos:
            raise self.fail(f"string of {length} bytes at byte {self.pos} overruns the file")
        raw = bytes(self.data[self.pos : self.pos + length])
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def value(self, type_id: int, depth: int = 0) -> Any:
        if type_id in _SCALARS:
            return self.unpack(_SCALARS[type_id])
        if type_id == _STRING:
            return self.string()
        if type_id == _ARRAY and depth < _MAX_DEPTH:
            item_type = self.unpack("I")
            count = self.unpack("Q")
            if count > len(self.data) - self.pos:
                raise self.fail(f"array of {count} items at byte {self.pos} overruns the file")
            if item_type in _SCALARS:  # one unpack for the whole array (token types...)
                return list(self.unpack(f"{count}{_SCALARS[item_type]}", many=True))
            return [self.value(item_type, depth + 1) for _ in range(count)]
        raise self.fail(f"unknown value type {type_id} at byte {self.pos}")


def byte_order(data: mmap.mmap | bytes, path: str) -> str:
    """``<`` or ``>`` from the first 8 bytes of a file: GGUF is little-endian unless the
    version only makes sense swapped. Raises :class:`~cuca.errors.ConfigurationError`
    without the magic or with an unknown version (the one check of a GGUF header)."""
    if len(data) < 8 or bytes(data[:4]) != _MAGIC:
        raise ConfigurationError(f"{path} is not a GGUF file (no GGUF magic)")
    (little,) = struct.unpack_from("<I", data, 4)
    (big,) = struct.unpack_from(">I", data, 4)
    if little in (2, 3):
        return "<"
    if big in (2, 3):
        return ">"
    raise ConfigurationError(f"{path}: unsupported GGUF version {little}")


def _parse(data: mmap.mmap | bytes, path: str) -> dict[str, Any]:
    reader = _Reader(data, byte_order(data, path), path)
    reader.pos = 8
    reader.unpack("Q")  # tensor count: the tensors are not read
    kv_count = reader.unpack("Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = reader.string()
        metadata[key] = reader.value(reader.unpack("I"))
    return metadata


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The key/value metadata of the GGUF file at ``path``.

    Scalars become ``int``, ``float`` or ``bool``, strings ``str`` and arrays lists.
    Raises :class:`~cuca.errors.ConfigurationError` if the file is missing, is not
    GGUF, or is truncated or inconsistent.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size < 24:
                raise ConfigurationError(f"{name} is not a GGUF file (only {size} bytes)")
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _parse(data, name)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {name}: {exc.strerror or exc}") from exc
