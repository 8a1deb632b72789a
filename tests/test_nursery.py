"""The background nursery of a block: the block's own exception is never lost."""

from __future__ import annotations

import pytest
import trio

from cuca._nursery import background_nursery


async def _fail(message: str) -> None:
    raise ValueError(message)


async def _fail_when_cancelled(message: str) -> None:
    try:
        await trio.sleep_forever()
    finally:
        raise ValueError(message)


async def test_background_nursery_body_error_comes_out_unwrapped() -> None:
    with pytest.raises(KeyError):
        async with background_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            raise KeyError("body")


async def test_background_nursery_task_error_alone_is_a_group() -> None:
    with pytest.RaisesGroup(ValueError):
        async with background_nursery() as nursery:
            nursery.start_soon(_fail, "task")
            await trio.sleep_forever()


async def test_background_nursery_body_and_task_errors_both_reach_the_user() -> None:
    """What the user sees when the block fails while a task fails too: one group holding
    the block's exception first, then the task's (before, the block's was lost)."""
    with pytest.raises(BaseExceptionGroup) as caught:
        async with background_nursery() as nursery:
            nursery.start_soon(_fail_when_cancelled, "task")
            await trio.sleep(0)
            raise KeyError("body")  # the task fails as it is cancelled
    errors = caught.value.exceptions
    assert isinstance(errors[0], KeyError) and errors[0].args == ("body",)
    assert any(isinstance(e, ValueError) and e.args == ("task",) for e in errors[1:])
