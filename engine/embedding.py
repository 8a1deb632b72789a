"""The local engine's embedding mode: a loaded GGUF's vectors, as llama-cpp-python's
``Llama.embed`` computes them.

Texts are tokenized as ``Llama.embed`` tokenizes them (special tokens added, control
text not parsed) and packed into steps the same way: sequences of one step until the
next would pass ``n_batch`` tokens or the context's sequences, each step from an empty
cache. So the vectors equal ``Llama(path, embedding=True, pooling_type=...,
n_ctx=n_batch, n_batch=n_batch).embed(texts)``'s, bit for bit, with the same threads.
The steps run in a worker thread, one call at a time per model; a cancelled call stops
before its next step.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Sequence
from pathlib import Path

import trio

from cuca.errors import ConfigurationError, ContextOverflowError
from cuca.vectors import EmbeddingCall, EmbeddingPart, Pooling, Send, Vector

from .backend import EmbeddingContext, LlamaBackend

__all__ = ["DEFAULT_EMBEDDING_BATCH", "LocalEmbeddings"]

DEFAULT_EMBEDDING_BATCH = 512
"""Tokens per embedding step (llama-cpp-python's ``Llama`` default): the longest text
the embedding mode takes."""

_UNSPECIFIED, _NONE = -1, 0  # LLAMA_POOLING_TYPE_UNSPECIFIED, _NONE
_POOLING_IDS: dict[Pooling, int] = {"mean": 1, "cls": 2, "last": 3}


class LocalEmbeddings:
    """The embedding route of one loaded model (:class:`~cuca.vectors.EmbeddingRoute`).

    ``pooling=None`` pools as the model declares (its GGUF's ``pooling_type``); a model
    that declares none (a chat model: llama.cpp would give a vector per token) needs
    ``pooling="mean"``, ``"last"`` or ``"cls"``, which also overrides a declared one.
    """

    name = "the local engine's embedding mode"
    provider = "local"
    max_inputs = 1024
    refuses_empty = True  # no tokens to evaluate (a model that adds no BOS)

    def __init__(self, backend: LlamaBackend, path: Path, n_batch: int) -> None:
        self._backend = backend
        self._path = path
        self.n_batch = n_batch
        self._contexts: dict[Pooling | None, EmbeddingContext] = {}
        self._lock = threading.Lock()

    async def embed(self, call: EmbeddingCall, send: Send) -> EmbeddingPart:
        """Embed ``call.texts`` in a worker thread (``send`` is unused: nothing goes
        over the network)."""
        return await trio.to_thread.run_sync(self.embed_sync, call.texts, call.pooling)

    def embed_sync(
        self, texts: Sequence[str], pooling: Pooling | None = None
    ) -> EmbeddingPart:
        """The vectors of ``texts`` and their token count, computed in this thread;
        from a trio worker thread, a cancellation of the caller stops it between
        steps."""
        with self._lock:
            context = self._context(pooling)
            backend = self._backend
            sequences = [backend.tokenize(t, special=False, add_special=True) for t in texts]
            for index, tokens in enumerate(sequences):
                self._check(index, tokens, context)
            vectors: list[Vector] = []
            for step in _steps(sequences, context.n_batch, context.n_seq_max):
                _check_cancelled()
                vectors += [array("f", raw) for raw in context.embed(step)]
        total = sum(len(tokens) for tokens in sequences)
        return EmbeddingPart(tuple(vectors), total, self._path.name)

    def _context(self, pooling: Pooling | None) -> EmbeddingContext:
        context = self._contexts.get(pooling)
        if context is not None:
            return context
        wanted = _UNSPECIFIED if pooling is None else _POOLING_IDS[pooling]
        context = self._backend.embedding_context(wanted, self.n_batch)
        if context.pooling == _NONE:
            context.close()
            raise ConfigurationError(
                f"the model {self._path.name} declares no pooling (llama.cpp would give a "
                'vector per token): pass pooling="mean", "last" or "cls"'
            )
        self._contexts[pooling] = context
        return context

    def _check(self, index: int, tokens: list[int], context: EmbeddingContext) -> None:
        if not tokens:
            raise ConfigurationError(f"input {index} has no tokens to embed")
        if len(tokens) > context.n_batch:
            raise ContextOverflowError(
                f"input {index} has {len(tokens)} tokens; the embedding mode takes at most "
                f"{context.n_batch}: load the model with a larger embedding_batch",
                limit=context.n_batch,
                requested=len(tokens),
            )

    def close(self) -> None:
        """Free the embedding contexts (the backend frees them too, first, on close)."""
        with self._lock:
            for context in self._contexts.values():
                context.close()
            self._contexts.clear()


def _steps(
    sequences: Sequence[list[int]], n_batch: int, n_seq_max: int
) -> list[list[list[int]]]:
    """The sequences packed into steps as ``Llama.embed`` packs them."""
    steps: list[list[list[int]]] = []
    step: list[list[int]] = []
    rows = 0
    for tokens in sequences:
        if step and (rows + len(tokens) > n_batch or len(step) >= n_seq_max):
            steps.append(step)
            step, rows = [], 0
        step.append(tokens)
        rows += len(tokens)
    if step:
        steps.append(step)
    return steps


def _check_cancelled() -> None:
    """Raise the caller's cancellation when this runs in a trio worker thread."""
    try:
        trio.from_thread.check_cancelled()
    except RuntimeError:  # not called from a trio thread: nothing to check
        pass
