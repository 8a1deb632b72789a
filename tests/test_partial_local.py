"""Partial objects on the real local model: the grammar-constrained answer streams as
prefix-consistent partials, the last one the parsed answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from support.partials import consistent

from cuca import CucaClient, LocalModel, ProviderEndpoint, UnifiedRequest
from cuca.engine import default_model_path
from cuca.partial import PartialObject
from cuca.schema import parse_output

pytestmark = pytest.mark.slow


@attrs.frozen
class Person:
    name: str = attrs.field(metadata={"json_schema": {"maxLength": 12}})
    age: int = attrs.field(metadata={"json_schema": {"minimum": 0, "maximum": 120}})
    pets: list[str] = attrs.field(metadata={"json_schema": {"maxItems": 3}})


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    with LocalModel.load(default_model_path(), n_ctx=1024) as loaded:
        yield loaded


async def test_partial_local_answer_streams_as_consistent_partials(model: LocalModel) -> None:
    request = (
        UnifiedRequest.new("local")
        .add_user_message("Describe a person with pets, as JSON.")
        .set_max_tokens(96)
        .set_output_schema(Person)
    )
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        async with client.generate_stream(request) as stream:
            partials: list[Any] = [p async for p in stream.partial()]
    assert request.output_schema is not None
    parsed = parse_output(request.output_schema, stream.message.text())  # Completion.parsed
    assert isinstance(parsed, Person) and partials[-1] == parsed
    final = json.loads(stream.message.text())
    views = [p.values for p in partials[:-1] if isinstance(p, PartialObject)]
    assert len(views) >= 3  # one after each field at least
    assert all(consistent(v, final) for v in views)
