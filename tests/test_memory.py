"""A 200 MB stream through one turn keeps memory flat: nothing buffers a response."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def test_memory_200_megabyte_stream_grows_rss_by_less_than_30_mib() -> None:
    server = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "endless_server.py"), "2000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        result = subprocess.run(
            [sys.executable, str(SCRIPTS / "big_turn.py"), url, "200"],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
    finally:
        server.kill()
        server.wait()
        assert server.stdout is not None
        server.stdout.close()
    report = json.loads(result.stdout)
    assert report["bytes"] >= 200 * 1024 * 1024
    assert report["blocks"] > 90_000  # every frame became a block
    assert report["growth"] < 30, report
