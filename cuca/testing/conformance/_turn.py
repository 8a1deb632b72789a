"""One turn of the adapter under test against the replay server, and what it left behind.

Each turn runs in its own `trio.run` with its own replay server and client, so that a
failure reproduces alone. A turn can be dropped at a chosen point: at the consumer, after
its n-th item (``break``), or when the n-th message reaches a named hop of the pipeline
(the consumer's scope is cancelled from there, whatever the other stages are doing).
"""

from __future__ import annotations

import gc
import os
import ssl
import threading
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from cuca.client import CucaClient
from cuca.errors import CucaError
from cuca.stages import after
from cuca.types import Block, UnifiedRequest

from .._replay import open_replay_server
from .._reply import Reply
from ._model import Subject

TURN_LIMIT = 20.0
"""Seconds a turn may take before it counts as hung (each turn is a few milliseconds)."""


@attrs.frozen
class Drop:
    """Where to drop a turn: when message number `index` (from 0) reaches `hop`, a point
    of the pipeline (``"consumer"``: the consumer's items, left with ``break``)."""

    hop: str
    index: int

    def __str__(self) -> str:
        return f"drop at message {self.index} of {self.hop}"


@attrs.frozen
class Outcome:
    """What the consumer saw: the items, the error the turn ended with (None: a clean
    end), whether the stream's response was set, and what the turn left behind."""

    items: tuple[Any, ...]
    error: BaseException | None
    completed: bool
    dropped: bool = False
    leaks: tuple[str, ...] = ()

    @property
    def blocks(self) -> list[Block]:
        return [item for item in self.items if not isinstance(item, CucaError)]

    @property
    def error_items(self) -> list[CucaError]:
        return [item for item in self.items if isinstance(item, CucaError)]

    def describe(self) -> str:
        end = "a clean end" if self.error is None else f"{type(self.error).__name__}: {self.error}"
        return f"{len(self.items)} item(s), then {end}"


def run_turn(
    subject: Subject,
    reply: Reply,
    *,
    read_timeout: float | None = None,
    drop: Drop | None = None,
) -> Outcome:
    """Run one turn against `reply` in a fresh `trio.run`; check for leaks after it."""
    return trio.run(_turn, subject, reply, read_timeout, drop)


async def _turn(
    subject: Subject, reply: Reply, read_timeout: float | None, drop: Drop | None
) -> Outcome:
    async with open_replay_server(reply) as server:
        before = _resources()
        async with _http(read_timeout) as http, subject.client(server.url, http) as client:
            outcome = await _consume(client, subject.request, drop)
        leaks: list[str] = []
        with trio.move_on_after(5):
            await server.wait_connections_closed()
        if server.open_connections:
            leaks.append(f"{server.open_connections} connection(s) still open on the server")
        await trio.testing.wait_all_tasks_blocked()
        leaks += _compare(before, await _settled(before))
    return attrs.evolve(outcome, leaks=tuple(leaks))


async def drive(client: CucaClient, request: UnifiedRequest, drop: Drop | None = None) -> Outcome:
    """Run one turn of `request` on `client` (any provider, the local engine included),
    dropped where `drop` says; `leaks` lists the tasks and threads it left behind.

    Call it from inside `trio.run` (a trio test); the client stays open.
    """
    before = _resources()
    outcome = await _consume(client, request, drop)
    await trio.testing.wait_all_tasks_blocked()
    after = await _settled(before)
    leaks = _compare(attrs.evolve(before, fds=None), after)
    return attrs.evolve(outcome, leaks=tuple(leaks))


async def _consume(client: CucaClient, request: UnifiedRequest, drop: Drop | None) -> Outcome:
    """Run the turn on `client`, catching whatever escapes it."""
    items: list[Any] = []
    error: BaseException | None = None
    completed = dropped = False
    with trio.CancelScope() as scope:
        stages = [] if drop is None or drop.hop == "consumer" else [_dropper(drop, scope)]
        try:
            with trio.fail_after(TURN_LIMIT):
                async with client.generate_stream(request, stages=stages) as stream:
                    async for item in stream:
                        items.append(item)
                        if drop is not None and drop.hop == "consumer" and len(items) > drop.index:
                            dropped = True
                            break
                completed = stream.response is not None
        except Exception as exc:  # the kit reports whatever escaped, typed or not
            error = exc
    if scope.cancelled_caught:
        dropped = True
    return Outcome(tuple(items), error, completed and not dropped, dropped)


def _http(read_timeout: float | None) -> httpx.AsyncClient:
    """The connection pool of one turn (one TLS context for all: making one costs more
    than a whole turn on loopback)."""
    global _TLS
    if _TLS is None:
        _TLS = ssl.create_default_context()
    timeout = httpx.Timeout(None, read=read_timeout)
    return httpx.AsyncClient(timeout=timeout, verify=_TLS, trust_env=False)


_TLS: ssl.SSLContext | None = None


def _dropper(drop: Drop, scope: trio.CancelScope) -> Any:
    """A pass-through stage at `drop.hop` that cancels the consumer's `scope` when its
    `drop.index`-th message goes by."""

    async def dropper(receive: Any, send: Any) -> None:
        async with send:
            count = 0
            async for message in receive:
                if count == drop.index:
                    scope.cancel()
                count += 1
                await send.send(message)

    return after(drop.hop, dropper, name="conformance_drop")


@attrs.frozen
class _Resources:
    tasks: frozenset[trio.lowlevel.Task]
    threads: frozenset[threading.Thread]
    fds: int | None


def _resources() -> _Resources:
    return _Resources(frozenset(_all_tasks()), frozenset(threading.enumerate()), _open_fds())


async def _settled(before: _Resources, grace: float = 0.5) -> _Resources:
    """The resources once threads that are on their way out have gone (`grace` seconds
    at most): a thread told to stop a moment ago is not a leak."""
    with trio.move_on_after(grace):
        while _new_threads(before, now := _resources()):
            await trio.sleep(0.005)
        return now
    return _resources()


def _new_threads(before: _Resources, after: _Resources) -> set[threading.Thread]:
    """Threads started since `before`, except trio's idle worker threads (a cache)."""
    return {
        thread
        for thread in after.threads - before.threads
        if thread.is_alive() and not thread.name.startswith("Trio thread")
    }


def _compare(before: _Resources, after: _Resources) -> list[str]:
    if after.fds is not None and before.fds is not None and after.fds > before.fds:
        gc.collect()  # a socket nobody holds any more is closed by the collector, not leaked
        after = attrs.evolve(after, fds=_open_fds())
    leaks = [f"task {task.name!r} outlived the turn" for task in after.tasks - before.tasks]
    leaks += [f"thread {t.name!r} outlived the turn" for t in _new_threads(before, after)]
    if before.fds is not None and after.fds is not None and after.fds > before.fds:
        leaks.append(f"{after.fds - before.fds} file descriptor(s) left open")
    return leaks


def _all_tasks() -> list[trio.lowlevel.Task]:
    found: list[trio.lowlevel.Task] = []
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        if task is None:
            continue
        found.append(task)
        pending += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return found


def _open_fds() -> int | None:
    """Open file descriptors of this process (None where /proc is not available)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def hops(local: bool = False) -> tuple[str, ...]:
    """The points a turn can be dropped at: every built-in stage of the HTTP (or the
    local) pipeline, and the consumer."""
    from cuca.stages import HTTP_POINTS, LOCAL_POINTS

    return (*(LOCAL_POINTS if local else HTTP_POINTS), "consumer")
