"""The rate-limit headers of the OpenAI-style servers (OpenAI, vLLM, DeepSeek and the
others that copy them): ``x-ratelimit-remaining-{requests,tokens}`` with
``x-ratelimit-reset-{requests,tokens}`` as a duration (``"1s"``, ``"6m0s"``, ``"20ms"``),
and the limit itself (``x-ratelimit-limit-*``). Read by :mod:`cuca.providers.ratelimit`.
"""

from __future__ import annotations

import re

from ..headers import HeaderFamily

__all__ = ["OPENAI_HEADERS", "parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """OpenAI's reset durations (``"1s"``, ``"6m0s"``, ``"1h2m3.5s"``, ``"20ms"``) in
    seconds, or ``None`` when ``text`` is not one."""
    text = text.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


OPENAI_HEADERS = HeaderFamily("x-ratelimit-{field}-{limit}", lambda text, now: parse_duration(text))
"""``x-ratelimit-remaining-tokens``, ``x-ratelimit-reset-tokens``, ``x-ratelimit-limit-tokens``."""
