"""Hostile variants of a good transcript: garbage bodies and wrongly typed JSON.

The kit knows nothing of the wire format, so it learns the vendor's JSON from the
transcript itself: every line holding a JSON object or array (after a prefix such as
``data: ``) is a frame, and a mutation replaces one value inside one frame with a value of
another type, keeping the keys the decoder looks for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

GARBAGE: dict[str, bytes] = {
    "invalid_utf8": b"data: \xff\xfe\xfd\n\n",
    "not_json": b"data: {this is not json\n\n",
    "wrong_shape": b'data: [1, 2, 3]\n\ndata: {"type": 7, "choices": "nope"}\n\n',
    "nul_and_controls": b'data: {"\x00": "\x01"}\n\n',
    "binary_noise": bytes(range(256)) * 4,
    "empty_objects": b'{}\n[]\ndata: {}\n\n{"type": {}}\n',
}
"""Bodies that no wire format accepts as a good turn."""

_OTHER_TYPES: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=1),
)


def frames(body: bytes) -> list[tuple[int, bytes, Any]]:
    """(line index, prefix, JSON value) for every line of `body` that holds JSON."""
    found = []
    for index, line in enumerate(body.split(b"\n")):
        start = min((i for i in (line.find(b"{"), line.find(b"[")) if i >= 0), default=-1)
        if start < 0:
            continue
        try:
            value = json.loads(line[start:].rstrip(b"\r"))
        except ValueError:
            continue
        if isinstance(value, dict | list):
            found.append((index, line[:start], value))
    return found


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside `value` (keys and indexes), the root excluded."""
    if not isinstance(value, dict | list):
        return
    children = value.items() if isinstance(value, dict) else enumerate(value)
    for key, child in children:
        yield (*prefix, key)
        yield from paths(child, (*prefix, key))


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of `value` with the value at `path` replaced by `new`."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = replaced(copy[head], rest, new)
    return copy


@st.composite
def wrongly_typed(draw: st.DrawFn, body: bytes) -> tuple[str, bytes]:
    """A description and a copy of `body` where one JSON value has another type."""
    found = frames(body)
    if not found:
        return "no JSON frame to mutate", body
    line, prefix, value = draw(st.sampled_from(found))
    path = draw(st.sampled_from(list(paths(value)) or [()]))
    old = _at(value, path)
    emptied = [type(old)()] if isinstance(old, dict | list) and old else []
    other = _OTHER_TYPES.filter(lambda candidate: type(candidate) is not type(old))
    new = draw(st.sampled_from(emptied) | other if emptied else other)
    lines = body.split(b"\n")
    text = json.dumps(replaced(value, path, new), ensure_ascii=False).encode()
    lines[line] = prefix + text + (b"\r" if lines[line].endswith(b"\r") else b"")
    where = "/".join(str(key) for key in path) or "the frame"
    return f"line {line + 1}: {where} = {new!r}", b"\n".join(lines)


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value
