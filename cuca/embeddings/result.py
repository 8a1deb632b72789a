"""What ``client.embed`` returns."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

import attrs

from cuca.cost import turn_cost
from cuca.types import ProviderEndpoint, TokenUsage
from cuca.vectors import Vector

__all__ = ["Embeddings"]


@attrs.frozen
class Embeddings:
    """The vectors of one ``embed`` call, one per input in input order, and what they
    cost.

    ``usage.prompt_tokens`` is the tokens the vendor reported for the texts sent (the
    cached ones cost nothing and are not counted); ``usage`` is ``None`` when the
    vendor's answer carries no count (Gemini's embedding routes): cuca does not
    estimate it. ``cached`` is how many inputs the response cache answered;
    ``requests`` how many requests were sent. Iterating, indexing and ``len`` reach
    ``vectors``.
    """

    vectors: tuple[Vector, ...]
    provider: ProviderEndpoint
    model: str
    usage: TokenUsage | None
    cached: int = 0
    requests: int = 0

    @property
    def dimensions(self) -> int:
        """The length of every vector."""
        return len(self.vectors[0]) if self.vectors else 0

    @property
    def cost(self) -> Decimal | None:
        """What the call cost in US dollars at today's prices (genai-prices), or
        ``None`` when the provider, the model or the usage is unknown."""
        return self.cost_at(None)

    def cost_at(self, when: datetime | None) -> Decimal | None:
        """The cost at the prices in force at ``when``; 0 when nothing was sent."""
        if self.requests == 0:
            return Decimal(0)
        return turn_cost(self.provider, self.model, self.usage, at=when)

    def __len__(self) -> int:
        return len(self.vectors)

    def __iter__(self) -> Iterator[Vector]:
        return iter(self.vectors)

    def __getitem__(self, index: int) -> Vector:
        return self.vectors[index]
