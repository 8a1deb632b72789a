"""Prefix reuse arithmetic."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cuca.engine.prefix import ReusePlan, common_prefix_length, plan_reuse

tokens = st.lists(st.integers(0, 5), max_size=30)


def test_prefix_common_prefix_length() -> None:
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2


def test_prefix_cold_cache_writes_everything() -> None:
    assert plan_reuse([], [5, 6, 7]) == ReusePlan(keep=0, write=3)


def test_prefix_keeps_the_common_prefix() -> None:
    plan = plan_reuse([1, 2, 3, 9, 9], [1, 2, 3, 4])
    assert (plan.read_tokens, plan.write_tokens) == (3, 1)


def test_prefix_always_leaves_the_last_prompt_token() -> None:
    assert plan_reuse([1, 2, 3], [1, 2, 3]) == ReusePlan(keep=2, write=1)
    assert plan_reuse([1, 2, 3, 4], [1, 2]) == ReusePlan(keep=1, write=1)


def test_prefix_empty_prompt() -> None:
    assert plan_reuse([1, 2], []) == ReusePlan(keep=0, write=0)


@given(cached=tokens, prompt=tokens)
def test_prefix_plan_adds_up(cached: list[int], prompt: list[int]) -> None:
    plan = plan_reuse(cached, prompt)
    assert plan.read_tokens + plan.write_tokens == len(prompt)
    assert cached[: plan.keep] == prompt[: plan.keep]
    assert plan.write_tokens >= min(1, len(prompt))
    # the longest reusable prefix: the next token differs, or either list ends, or only
    # the prompt's last token is left (it is always prefilled again)
    keep = plan.keep
    assert (
        keep == len(cached)
        or keep >= len(prompt) - 1
        or cached[keep] != prompt[keep]
    ), (cached, prompt, plan)
