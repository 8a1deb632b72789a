"""What a partial answer must be: a prefix-consistent view of the final value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def consistent(part: Any, final: Any) -> bool:
    """Whether ``part`` is a view of ``final`` so far: every key it has is final's with a
    consistent value, a list is a prefix, and a scalar is final's own."""
    if isinstance(part, dict):
        return isinstance(final, dict) and all(
            key in final and consistent(value, final[key]) for key, value in part.items()
        )
    if isinstance(part, list):
        return (
            isinstance(final, list)
            and len(part) <= len(final)
            and all(consistent(a, b) for a, b in zip(part, final, strict=False))
        )
    return type(part) is type(final) and part == final


class Batches:
    """A stream's batches from a list, as ResponseStream.receive_batch gives them."""

    def __init__(self, batches: Sequence[Sequence[Any]]) -> None:
        self.batches = list(batches)

    async def receive_batch(self) -> Sequence[Any]:
        if not self.batches:
            raise StopAsyncIteration
        return self.batches.pop(0)
