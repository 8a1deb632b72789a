"""Fallback between clients: the next one takes over only before the caller has seen
anything of an answer.

A turn is handed to the caller once its first item has arrived (see
:meth:`cuca.ResponseStream.ready`). Before that point a failure that says "try
elsewhere" (a connection that could not be made, retries used up on a 5xx or a 429)
moves the turn to the next client. After it nothing moves: the caller may have printed
half an answer, run a tool or counted tokens, and a second answer from another model
cannot be spliced onto the first, so the error is raised as it is, typed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    nullcontext,
)
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import attrs

from cuca._block import turn_block
from cuca.admission import TurnGate, admitted
from cuca.calls import TurnCalls
from cuca.errors import (
    ConfigurationError,
    CucaError,
    HttpStatusError,
    RateLimitError,
    ServerError,
    TransportError,
)
from cuca.retry import refused_moves_on
from cuca.stream import ResponseStream, TurnClient
from cuca.types import UnifiedRequest

if TYPE_CHECKING:
    from cuca.retry import RetryPolicy
    from cuca.turn import Insertion

__all__ = ["FallbackClient", "default_fallback_on", "first_answer", "turn_options"]

FallbackOn = Callable[[CucaError], bool]


def default_fallback_on(error: CucaError) -> bool:
    """Whether another client should take the turn after ``error`` (raised before the
    first item): a :class:`TransportError` (``ConnectError``, ``ReadTimeout``,
    ``StreamIncomplete``, ``DeadlineExceeded``; the client's retries, if any, already
    used up), a :class:`RateLimitError` (429), a :class:`ServerError` (5xx) or a 408.
    A bad request or a bad key (400, ``AuthenticationError``, 404) would fail the same
    way elsewhere and is raised at once."""
    if isinstance(error, TransportError | RateLimitError | ServerError):
        return True
    return isinstance(error, HttpStatusError) and error.status == 408


class StreamingClient(Protocol):
    """One try's client, the turn's own options bound: what :func:`first_answer` sends
    the request to."""

    def generate_stream(
        self, request: UnifiedRequest
    ) -> AbstractAsyncContextManager[ResponseStream]: ...


NextClient = AbstractAsyncContextManager[StreamingClient]
"""One try of a turn: entering gives the client to send it to; leaving ends the try."""


def turn_options(
    stages: Sequence[Insertion[Any]],
    retry: RetryPolicy | None,
    fused: bool | None,
    headers: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The turn's own options a service passes on to the client that answers: only
    those given, so a client that takes none (``generate_stream(request)``) still
    serves."""
    given = {"stages": stages, "retry": retry, "fused": fused, "headers": headers}
    return {name: value for name, value in given.items() if value not in ((), None)}


@asynccontextmanager
async def first_answer(
    next_attempt: Callable[[], NextClient | None],
    request: UnifiedRequest,
    fallback_on: FallbackOn,
    failed: Callable[[CucaError], None] = lambda error: None,
) -> AsyncIterator[ResponseStream]:
    """The stream of the first attempt whose turn produced an item (or ended cleanly);
    ``next_attempt`` is asked for another (``None``: there is none) only after a
    failure, and must give at least one.

    Every failure before the first item is passed to ``failed``. One that
    ``fallback_on`` refuses, or the last one, is raised, with the earlier ones noted.
    """
    errors: list[CucaError] = []
    while (attempt := next_attempt()) is not None:
        async with attempt as client, client.generate_stream(request) as stream:
            try:
                await stream.ready()
            except CucaError as error:
                failed(error)
                errors.append(error)
                if fallback_on(error):
                    continue
                raise _noted(error, errors) from None
            yield stream
            return
    raise _noted(errors[-1], errors) from None


def _noted(error: CucaError, errors: list[CucaError]) -> CucaError:
    """``error``, with a note naming the failures before it (the last one is itself)."""
    for earlier in errors[:-1]:
        error.add_note(f"tried before: {earlier!r}")
    return error


class FallbackClient(TurnCalls):
    """An ordered list of clients (providers, models, servers) that answer as one.

    ``generate_stream``, ``generate_stream_with_response``, ``generate`` and
    ``run_tools`` behave as a client's and take the same arguments (the last three are
    :class:`~cuca.calls.TurnCalls`, over ``generate_stream``). ``run_tools`` falls back
    step by step: a step may be answered by another client than the one before it
    (signed reasoning is then replayed only to the provider that signed it). An
    entry may be a ``(client, model)`` pair: that client then gets the request with
    ``model`` in place of the request's own. A turn
    goes to the first client; if that fails before its first item reaches the caller
    and ``fallback_on(error)`` says so (:func:`default_fallback_on`: transport errors,
    408, 429, 5xx), the next one gets it, and so on; each client applies its own retry
    policy first (but to a refused connection, below), so no client sees a request
    more often than its policy allows. Once
    an item has been yielded, a failure is raised as it is and no other client is
    asked. The response says who answered (``provider``, ``model``, ``endpoint``).
    Closing the fallback client closes every client it holds.

    ``rate_limiter`` (a :class:`~cuca.RateLimiter`) admits each turn once, whichever
    client answers it; each client may have its own as well.

    A connection refused before any byte (a dead server) moves the turn to the next
    client at once: the clients' retries are kept for what a server answered (429,
    5xx) and for connect timeouts. ``retry_refused=True`` retries a refused
    connection per each client's policy first.
    """

    written: ClassVar[str] = "fallback"

    def __init__(
        self,
        clients: Sequence[TurnClient | tuple[TurnClient, str]],
        *,
        fallback_on: FallbackOn = default_fallback_on,
        rate_limiter: TurnGate | None = None,
        retry_refused: bool = False,
    ) -> None:
        if not clients:
            raise ConfigurationError("a FallbackClient needs at least one client")
        self.clients = tuple(c if isinstance(c, tuple) else (c, None) for c in clients)
        self.fallback_on = fallback_on
        self.retry_refused = retry_refused
        self.rate_limiter = rate_limiter

    async def __aenter__(self) -> FallbackClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every client (each closes its own connection pool)."""
        for client, _ in self.clients:
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()

    @turn_block("fallback.generate_stream(request)")
    @asynccontextmanager
    async def generate_stream(
        self,
        request: UnifiedRequest,
        *,
        stages: Sequence[Insertion[Any]] = (),
        retry: RetryPolicy | None = None,
        fused: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[ResponseStream]:
        """Stream one turn from the first client that answers (see the class); the
        turn's own ``stages``, ``retry``, ``fused`` and ``headers`` go to each client
        it tries, as :meth:`CucaClient.generate_stream` takes them."""
        clients = iter(self.clients)
        options = turn_options(stages, retry, fused, headers)

        def next_attempt() -> NextClient | None:
            client, model = next(clients, (None, None))
            if client is None:
                return None
            return nullcontext(_Bound(client, model, options))

        with _maybe(not self.retry_refused, refused_moves_on):
            async with (
                admitted(self.rate_limiter, request) as ran,
                first_answer(next_attempt, request, self.fallback_on) as stream,
            ):
                ran(stream)
                yield stream


def _maybe(
    wanted: bool, manager: Callable[[], AbstractContextManager[None]]
) -> AbstractContextManager[None]:
    return manager() if wanted else nullcontext()


@attrs.frozen
class _Bound:
    """A client with the turn's own options bound, sending every request with its own
    model when it has one."""

    client: TurnClient
    model: str | None
    options: Mapping[str, Any]

    def generate_stream(
        self, request: UnifiedRequest
    ) -> AbstractAsyncContextManager[ResponseStream]:
        if self.model is not None:
            request = attrs.evolve(request, model=self.model)
        return self.client.generate_stream(request, **self.options)
