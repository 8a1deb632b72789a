"""Prefix reuse: how much of the K/V cache a new prompt can keep.

Pure arithmetic, no llama.cpp: the engine keeps the longest common prefix of the
tokens already in its cache and the new prompt, but always leaves the last prompt
token to prefill, because sampling needs fresh logits for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = ["ReusePlan", "common_prefix_length", "plan_reuse"]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@attrs.frozen
class ReusePlan:
    """What to do with the cache for one prompt.

    ``keep`` tokens of the cache stay (they are the prompt's ``read_tokens``); the
    ``write`` tokens after them are prefilled. ``keep + write`` is the prompt length.
    """

    keep: int
    write: int

    @property
    def read_tokens(self) -> int:
        return self.keep

    @property
    def write_tokens(self) -> int:
        return self.write


def plan_reuse(cached: Sequence[int], prompt: Sequence[int]) -> ReusePlan:
    """Keep the longest common prefix of ``cached`` and ``prompt``, minus the last
    prompt token when the whole prompt is cached (its logits must be recomputed)."""
    keep = min(common_prefix_length(cached, prompt), max(len(prompt) - 1, 0))
    return ReusePlan(keep=keep, write=len(prompt) - keep)
