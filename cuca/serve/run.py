"""Running the ASGI application under trio, with hypercorn's trio worker.

:func:`serve` binds, reports the URL it bound (port 0: any free port) through
``task_status`` and serves until cancelled, so that tests and ``cuca serve`` start it
the same way: ``url = await nursery.start(serve, app, "127.0.0.1", 0)``.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

import trio

from cuca.errors import ConfigurationError

__all__ = ["is_loopback", "serve"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host``:``port`` until cancelled; ``task_status.started`` gets
    the base URL (``http://127.0.0.1:PORT``)."""
    try:
        from hypercorn.config import Config
        from hypercorn.trio import serve as hypercorn_serve
    except ImportError as exc:  # pragma: no cover - the serve extra is missing
        raise ConfigurationError(
            f"cuca serve needs the serve extra: pip install 'cuca[serve]' ({exc})"
        ) from None
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("cuca.serve.hypercorn")
    config.keep_alive_timeout = 75.0
    config.graceful_timeout = 1.0

    async def started(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await hypercorn_serve(app, config, task_status=task_status, mode="asgi")

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(started)
        task_status.started(binds[0])
