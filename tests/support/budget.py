"""How many Hypothesis examples a property test runs: the ``ci`` or the ``nightly`` budget.

``CUCA_HYPOTHESIS_PROFILE`` selects the profile (``ci`` when unset). Each test states its
``ci`` count with ``examples(n)``; ``nightly`` runs twenty times as many. Tests without an
explicit count get the profile's default (``ci``: Hypothesis' 100; ``nightly``: 2,000).
See ``docs/faults.md``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = {"ci": 1, "nightly": 20}
PROFILE = os.environ.get("CUCA_HYPOTHESIS_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise RuntimeError(
        f"CUCA_HYPOTHESIS_PROFILE must be one of {sorted(PROFILES)}, got {PROFILE!r}"
    )
SCALE = PROFILES[PROFILE]

# No verdict depends on how busy the machine is: Hypothesis' deadline and its "input
# generation is slow" health check measure wall-clock time, so neither is on (a test
# that sets its own ``suppress_health_check`` keeps ``too_slow`` off: it lists it too).
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", max_examples=100, **_UNTIMED)
settings.register_profile("nightly", max_examples=100 * PROFILES["nightly"], **_UNTIMED)
settings.load_profile(PROFILE)


def examples(ci: int) -> int:
    """The number of examples for a test that runs `ci` examples in the ``ci`` profile."""
    return ci * SCALE


def offsets(ci: int) -> int | None:
    """Byte offsets to cut a transcript at: `ci` of them, or every one at night (None)."""
    return None if PROFILE == "nightly" else ci
