"""A client's calls that are not turns: ``embed`` and the batches, on its one backend.

Besides its turns (:mod:`cuca.calls`), a :class:`~cuca.CucaClient` embeds texts
(:mod:`cuca.embeddings`) and submits batch jobs (:mod:`cuca.batches`). Those go past the
turn's seams, straight to the client's backend, admitted by the same gates and answered
from the same cache; they are written here, once, so that the client stays a façade
that chooses a backend. A client over a pool of base URLs has none of them: each goes to
one server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .calls import TurnCalls
from .errors import ConfigurationError
from .settings import require_trio

if TYPE_CHECKING:
    from cuca.batches import BatchJob, BatchPolling
    from cuca.batches.job import BatchBackend
    from cuca.embeddings import Embeddings
    from cuca.routing.pool import Pool
    from cuca.store import Store

    from .admission import TurnGate, TurnReplay
    from .backends import HttpBackend, LocalBackend
    from .plugins import CucaPlugin
    from .retry import RetryPolicy
    from .types import ProviderEndpoint, UnifiedRequest
    from .vectors import Pooling

__all__ = ["BulkCalls"]


class BulkCalls(TurnCalls):
    """``embed``, ``batch`` and ``batch_job`` of a client over one backend (see the
    module). The client sets what they run on: its provider, plugins and retry policy,
    its backend, its pool (``None`` for one server), its gates and its replaying
    plugin (:func:`cuca.settings.admitters`)."""

    provider: ProviderEndpoint
    plugins: tuple[CucaPlugin, ...]
    retry: RetryPolicy
    _backend: HttpBackend | LocalBackend
    _pool: Pool | None
    _gates: tuple[TurnGate, ...]
    _replay: TurnReplay | None

    # -- batches (cuca.batches; docs/batches.md) ---------------------------------------

    async def batch(
        self,
        requests: Mapping[str, UnifiedRequest] | Sequence[UnifiedRequest],
        *,
        store: Store | None = None,
        label: str = "cuca batch",
        polling: BatchPolling | None = None,
    ) -> BatchJob:
        """Submit ``requests`` as one batch job, answered within a day at the vendor's
        batch rate (OpenAI's Batch API, Anthropic's Message Batches, Gemini's batch
        mode), or run as concurrent turns on the local engine. ``requests`` maps your
        ids to requests (a sequence is numbered ``"0"``, ``"1"``...); the job is recorded
        in ``store`` (this process's memory by default: pass a shared store for
        ``batch_job`` to find it after a restart). A :class:`~cuca.Budget` among the
        plugins reserves the job's projection now and is charged when its results are
        read. See docs/batches.md."""
        from cuca.batches.job import submit

        require_trio()
        return await submit(self._batches(), requests, store=store, label=label, polling=polling)

    async def batch_job(
        self, job_id: str, *, store: Store | None = None, polling: BatchPolling | None = None
    ) -> BatchJob:
        """The batch job ``job_id`` (a :attr:`BatchJob.id`), from its record in
        ``store``: in this process or another sharing the store, after a restart."""
        from cuca.batches.job import reattach

        require_trio()
        return await reattach(self._batches(), job_id, store=store, polling=polling)

    def _batches(self) -> BatchBackend:
        """Where this client's batches run: the wire's batch format, or the engine."""
        if self._pool is not None:
            raise ConfigurationError("a batch goes to one server: not to a pool of base URLs")
        from cuca.batches.local import LocalBatches
        from cuca.batches.wire import WireBatches

        from .backends import LocalBackend

        backend = self._backend
        if isinstance(backend, LocalBackend):
            return LocalBatches(self.generate, backend.local().n_seq)
        batch_wire = backend.adapter().batch_wire()
        return WireBatches(self.provider, batch_wire, backend.batch_call, self.plugins)

    # -- embeddings (cuca.embeddings; docs/embeddings.md) -------------------------------

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        model: str = "",
        dimensions: int | None = None,
        pooling: Pooling | None = None,
        batch_size: int | None = None,
        concurrency: int = 4,
    ) -> Embeddings:
        """The embedding of each of ``inputs`` (one text or many), in input order, with
        exact usage and cost where the vendor reports them (see docs/embeddings.md and
        :func:`cuca.embeddings.embed`). ``dimensions`` shortens the vectors where the
        model can; ``pooling`` is for the local engine's models that declare none;
        ``batch_size`` caps the texts per request (the backend's limit is the most);
        ``concurrency`` the requests in flight. Anthropic and DeepSeek have no
        embedding route: a ``ConfigurationError`` before any request."""
        from cuca.cache import ResponseCache
        from cuca.embeddings import EmbeddingTarget, embed

        require_trio()
        if self._pool is not None:
            raise ConfigurationError("embed runs on one server: give the client one base_url")
        backend = self._backend
        route, send = backend.embedding_route(), backend.request_json
        cache = self._replay if isinstance(self._replay, ResponseCache) else None
        target = EmbeddingTarget(
            self.provider, route, send, self._gates, cache, backend.endpoint, self.retry
        )
        return await embed(
            target,
            inputs,
            model=model,
            dimensions=dimensions,
            pooling=pooling,
            batch_size=batch_size,
            concurrency=concurrency,
        )
