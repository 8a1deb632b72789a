"""Shared fixtures. Tests import helpers from ``tests/support``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import support.budget  # noqa: F401  (loads the Hypothesis profile chosen by the environment)
