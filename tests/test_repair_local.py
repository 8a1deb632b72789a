"""Repair on the real local model: the grammar guarantees the shape, and repair covers
what it cannot express, a pydantic validator."""

from __future__ import annotations

from collections.abc import Iterator

import pydantic
import pytest

from cuca import CucaClient, LocalModel, OutputValidationError, ProviderEndpoint, UnifiedRequest
from cuca.engine import default_model_path

pytestmark = pytest.mark.slow

SEEN: list[str] = []


class Pet(pydantic.BaseModel):
    """The first name it is shown is refused (a rule no grammar can hold: it depends on
    what came before), the next ones pass."""

    name: str = pydantic.Field(max_length=12)
    legs: int = pydantic.Field(ge=0, le=8)

    @pydantic.field_validator("name")
    @classmethod
    def not_the_first(cls, value: str) -> str:
        SEEN.append(value)
        if len(SEEN) == 1:
            raise ValueError("that name is taken, choose another")
        return value


class Shouted(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)

    @pydantic.field_validator("name")
    @classmethod
    def has_a_digit_and_a_bang(cls, value: str) -> str:
        if "!" not in value or not any(c.isdigit() for c in value) or "q" not in value:
            raise ValueError("the name must hold a digit, a q and a '!'")
        return value


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    with LocalModel.load(default_model_path(), n_ctx=2048) as loaded:
        yield loaded


def ask(cls: type, text: str) -> UnifiedRequest:
    request = UnifiedRequest.new("local").add_user_message(text).set_max_tokens(48)
    return request.set_output_schema(cls)


async def test_repair_local_validator_refusal_is_sent_back_and_the_next_answer_kept(
    model: LocalModel,
) -> None:
    SEEN.clear()
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        done = await client.generate(ask(Pet, "Name a pet and its legs, as JSON."), repair=2)
    assert isinstance(done.parsed, Pet)
    assert len(done.attempts) == 2 and len(SEEN) >= 2
    first = done.attempts[0].error
    assert first is not None and "that name is taken" in first.message
    usages = [a.usage for a in done.attempts]
    assert all(u is not None for u in usages) and done.response.usage is not None
    assert done.response.usage.completion_tokens == sum(u.completion_tokens for u in usages if u)
    # the second prompt held the first answer and the error: it is longer
    assert usages[1] is not None and usages[0] is not None
    assert usages[1].prompt_tokens > usages[0].prompt_tokens


async def test_repair_local_gives_up_after_the_last_try(model: LocalModel) -> None:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        with pytest.raises(OutputValidationError) as caught:
            await client.generate(ask(Shouted, "Give a name, as JSON."), repair=1)
    attempts = caught.value.attempts
    assert len(attempts) == 2
    assert all("must hold a digit" in a.error.message for a in attempts)  # type: ignore[attr-defined]
