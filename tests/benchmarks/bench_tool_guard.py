"""Benchmark what checking a tool call's arguments costs, per call.

Run ``python tests/benchmarks/bench_tool_guard.py``: one command, one run. Side by
side, best of ``REPEATS`` rounds of ``CALLS`` calls each, in microseconds per call:

- ``Tool.check`` (the loop's check: one ``jsonschema`` validator built per tool) on
  valid arguments, and on arguments with two problems (listed);
- the peer: ``jsonschema.validate(arguments, schema)``, what a hand-written loop does
  (it builds and checks the validator on every call);
- ``Tool.call`` of an async tool that returns at once (conversion to the hints and the
  call itself), the cost the check adds to;
- pydantic's ``TypeAdapter(Model).validate_python`` on the same arguments, for scale.

Ratios printed: the check against the peer and against the call. Never pass/fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jsonschema
import pydantic
import trio

from cuca import Tool

REPEATS = 7
CALLS = 2_000


class Place(pydantic.BaseModel):
    city: str
    country: str = "FR"


async def forecast(
    place: Place, days: int = 1, units: str = "celsius", hourly: bool = False
) -> str:
    """Forecast of a place."""
    return "sunny"


class Arguments(pydantic.BaseModel):
    place: Place
    days: int = 1
    units: str = "celsius"
    hourly: bool = False


GOOD: dict[str, Any] = {"place": {"city": "Paris"}, "days": 3, "units": "celsius"}
BAD: dict[str, Any] = {"place": {"town": "Paris"}, "days": "three"}


def best(run: Callable[[], None]) -> float:
    """Microseconds per call, best round."""
    rounds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(CALLS):
            run()
        rounds.append((time.perf_counter() - start) / CALLS * 1e6)
    return min(rounds)


async def call_cost(tool: Tool) -> float:
    rounds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(CALLS):
            await tool.call(GOOD)
        rounds.append((time.perf_counter() - start) / CALLS * 1e6)
    return min(rounds)


def main() -> None:
    tool = Tool.from_function(forecast)
    schema = dict(tool.schema)
    assert tool.check(GOOD) == () and len(tool.check(BAD)) == 2
    adapter = pydantic.TypeAdapter(Arguments)
    check = best(lambda: tool.check(GOOD))
    check_bad = best(lambda: tool.check(BAD))
    peer = best(lambda: jsonschema.validate(GOOD, schema))
    typed = best(lambda: adapter.validate_python(GOOD))
    call = trio.run(call_cost, tool)
    print(f"argument validation per call, {CALLS} calls x {REPEATS} rounds (best), microseconds")
    print(f"  Tool.check, valid arguments          {check:8.1f}")
    print(f"  Tool.check, two problems listed      {check_bad:8.1f}")
    print(f"  jsonschema.validate (peer)           {peer:8.1f}")
    print(f"  pydantic TypeAdapter.validate_python {typed:8.1f}")
    print(f"  Tool.call of an async tool           {call:8.1f}")
    print(f"ratio check / jsonschema.validate: {check / peer:.3f}")
    print(f"ratio check / Tool.call:           {check / call:.3f}")


if __name__ == "__main__":
    main()
