"""``python -m cuca``: the ``cuca`` command (see :mod:`cuca.cli`)."""

from __future__ import annotations

import sys

from cuca.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
