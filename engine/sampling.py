"""How the engine picks each token: the per-model sampling settings.

``top_k``, ``top_p``, ``seed`` and ``temperature`` are a loaded model's defaults; a
request's own ``temperature``, ``top_p`` and ``seed`` win over them, turn by turn.
:meth:`SamplingConfig.steps` turns a request's values into the chain of samplers the
engine builds, so the choice is testable without llama.cpp.
"""

from __future__ import annotations

import attrs

__all__ = ["DEFAULT_TEMPERATURE", "SamplerStep", "SamplingConfig"]

DEFAULT_TEMPERATURE = 0.8
"""The temperature of a request that sets none (llama.cpp's own default)."""

RANDOM_SEED = 0xFFFFFFFF
"""llama.cpp's "pick a random seed" value (``LLAMA_DEFAULT_SEED``)."""


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


def _probability(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{attribute.name} must be in (0, 1], got {value}")


def _seed(instance: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and not 0 <= value < RANDOM_SEED:
        raise ValueError(f"seed must be in [0, 2**32 - 1), got {value}")


@attrs.frozen
class SamplingConfig:
    """Sampling defaults of a loaded model.

    ``top_k`` (0 disables it) and ``top_p`` narrow the candidates; ``seed`` fixes the
    random draws, so the same request on the same model gives the same output (``None``
    draws a fresh seed each turn). ``temperature``, ``top_p`` and ``seed`` apply to
    requests that set none (``UnifiedRequest.temperature``, ``top_p``, ``seed``); a
    temperature of 0 always means greedy decoding.
    """

    top_k: int = attrs.field(default=40, validator=_non_negative)
    top_p: float = attrs.field(default=0.95, validator=_probability)
    seed: int | None = attrs.field(default=None, validator=_seed)
    temperature: float = DEFAULT_TEMPERATURE

    def steps(
        self,
        temperature: float | None,
        *,
        top_p: float | None = None,
        seed: int | None = None,
    ) -> tuple[SamplerStep, ...]:
        """The sampler chain for one turn at a request's ``temperature``, ``top_p`` and
        ``seed`` (each ``None``: this config's).

        Greedy at temperature 0 (or below); else top-k, top-p, temperature, then a
        seeded draw.
        """
        temp = self.temperature if temperature is None else temperature
        if temp <= 0.0:
            return (SamplerStep("greedy"),)
        seed = self.seed if seed is None else seed
        return (
            SamplerStep("top_k", self.top_k),
            SamplerStep("top_p", self.top_p if top_p is None else top_p),
            SamplerStep("temp", temp),
            SamplerStep("dist", RANDOM_SEED if seed is None else seed),
        )


@attrs.frozen
class SamplerStep:
    """One sampler of the chain: ``kind`` is greedy, top_k, top_p, temp or dist."""

    kind: str
    value: float = 0.0
