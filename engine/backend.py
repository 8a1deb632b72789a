"""The only module that calls llama.cpp, through llama-cpp-python's low-level bindings.

We use the C API (model, context, vocabulary, memory, sampler chain) rather than the
``Llama`` class: it compiles every chat template in the file with its own jinja2
setup at load, keeps Python state beside the K/V cache, and its ``detokenize`` drops
pieces longer than 32 bytes. Here each call is one ctypes call, which releases the GIL,
so the engine thread leaves the trio thread free.

``llama_cpp`` has no usable type information, so it is imported lazily as an untyped
module and every value leaving this module is converted to a plain ``int``/``bytes``.
Not thread-safe: one thread (the model's engine thread, see ``scheduler``) runs the
context; tokenizing may happen elsewhere.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from cuca.errors import ConfigurationError

from .grammar import GrammarSampler
from .sampling import SamplerStep

__all__ = [
    "DECODE_ABORTED",
    "EmbeddingContext",
    "LlamaBackend",
    "LlamaBatch",
    "Row",
    "Sampler",
    "llama_cpp_module",
]

DECODE_ABORTED = 2
"""``llama_decode``'s return code when the abort callback stopped it."""

_FLASH_ATTN_DISABLED, _FLASH_ATTN_ENABLED = 0, 1  # LLAMA_FLASH_ATTN_TYPE_*
_ATTR_UNKNOWN = 1 << 1  # LLAMA_TOKEN_ATTR_UNKNOWN
_ATTR_CONTROL = 1 << 3  # LLAMA_TOKEN_ATTR_CONTROL
_init_lock = threading.Lock()
_initialised = False


def llama_cpp_module() -> ModuleType:
    """``llama_cpp``, imported on first use; a missing install is a configuration error."""
    global _initialised
    try:
        module = importlib.import_module("llama_cpp")
    except ImportError as exc:
        raise ConfigurationError(
            "the local engine needs llama-cpp-python: pip install 'cuca[local]'"
        ) from exc
    with _init_lock:
        if not _initialised:
            # llama-cpp-python routes llama.cpp's log through this logger and prints
            # everything while it is unset; keep errors only unless the user chose.
            logger = logging.getLogger("llama-cpp-python")
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.ERROR)
            module.llama_backend_init()
            _initialised = True
    return module


def _free(ll: Any, ctx: Any, model: Any) -> None:
    ll.llama_free(ctx)
    ll.llama_model_free(model)


Row = tuple[int, int, int, bool]
"""One row of a batch: token, position, sequence id, whether its logits are wanted."""


class LlamaBackend:
    """One loaded model and its context of ``n_seq`` sequences (ids ``0..n_seq-1``).

    Each sequence has its own stream of ``n_ctx`` cells (llama.cpp's non-unified K/V
    cache): a sequence's tokens sit in their own cells in position order whatever the
    other sequences do, so its attention adds them up in the same order as on a cold
    model, and one sequence can be dropped, copied or saved on its own.
    """

    def __init__(
        self,
        path: str,
        *,
        n_ctx: int,
        n_batch: int,
        n_ubatch: int,
        n_threads: int,
        n_threads_batch: int,
        flash_attention: bool,
        n_seq: int = 1,
    ) -> None:
        ll = self._ll = llama_cpp_module()
        model_params = ll.llama_model_default_params()
        # No extra buffer types (AMX, repacked weights): they run one kernel for a single
        # row and another for many (gemv, gemm), so a row's bits could depend on the size
        # of its step; and llama.cpp's AMX kernel crashes (SIGSEGV in
        # ggml_backend_amx_mul_mat) on any multi-token step on CPUs that report AMX.
        model_params.use_extra_bufts = False
        model = ll.llama_model_load_from_file(path.encode(), model_params)
        if not model:
            raise ConfigurationError(f"llama.cpp could not load the model in {path}")
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx * n_seq
        params.n_batch = n_batch
        params.n_ubatch = n_ubatch
        params.flash_attn_type = _FLASH_ATTN_ENABLED if flash_attention else _FLASH_ATTN_DISABLED
        params.n_seq_max = n_seq
        params.kv_unified = False
        # a sliding-window model (Gemma 3, gpt-oss) keeps every position in its window
        # layers too, so a kept prefix is whole (llama.cpp's and llama-cpp-python's
        # default; a window-sized cache drops old positions and cannot go back)
        params.swa_full = True
        params.n_threads = n_threads
        params.n_threads_batch = n_threads_batch
        params.no_perf = True
        ctx = ll.llama_init_from_model(model, params)
        if not ctx:
            ll.llama_model_free(model)
            raise ConfigurationError(f"llama.cpp could not create a context for {path}")
        self._model, self._ctx = model, ctx
        self._free = weakref.finalize(self, _free, ll, ctx, model)
        self._vocab = ll.llama_model_get_vocab(model)
        self._memory = ll.llama_get_memory(ctx)
        self.n_ctx = int(ll.llama_n_ctx_seq(ctx))  # per sequence (rounded up to 256)
        self.n_swa = int(ll.llama_model_n_swa(model))  # the attention window; 0: none
        self.n_seq = n_seq
        self.n_batch = n_batch
        self.n_threads, self.n_threads_batch = n_threads, n_threads_batch
        self._embedding: list[EmbeddingContext] = []  # freed before the model
        self._pieces: dict[int, bytes] = {}
        self._abort: Any = None  # keeps the ctypes callback alive while installed
        n_vocab = int(ll.llama_vocab_n_tokens(self._vocab))
        hidden = _ATTR_CONTROL | _ATTR_UNKNOWN
        self.control_ids = frozenset(
            t for t in range(n_vocab) if ll.llama_vocab_get_attr(self._vocab, t) & hidden
        )

    def close(self) -> None:
        """Free the context and the model (idempotent), and the embedding contexts
        on its weights first."""
        for context in self._embedding:
            context.close()
        self._free()

    @property
    def closed(self) -> bool:
        return not self._free.alive

    @property
    def n_ctx_train(self) -> int:
        """The context the model was trained with (its GGUF's ``context_length``)."""
        return int(self._ll.llama_model_n_ctx_train(self._model))

    def chat_template(self) -> str | None:
        """The model's default chat template (``tokenizer.chat_template``), if any."""
        raw: bytes | None = self._ll.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    # -- vocabulary ----------------------------------------------------------------

    def token_text(self, token: int) -> str:
        """The vocabulary's text of ``token`` (for control tokens, their markup)."""
        raw: bytes = self._ll.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace")

    @property
    def bos_id(self) -> int:
        return int(self._ll.llama_vocab_bos(self._vocab))

    @property
    def eos_id(self) -> int:
        return int(self._ll.llama_vocab_eos(self._vocab))

    @property
    def adds_bos(self) -> bool:
        """Whether the vocabulary wants a BOS token at the start of every prompt."""
        return bool(self._ll.llama_vocab_get_add_bos(self._vocab))

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends generation (EOS, EOT and their family)."""
        return bool(self._ll.llama_vocab_is_eog(self._vocab, token))

    def tokenize(self, text: str, *, special: bool, add_special: bool = False) -> list[int]:
        """``text`` as token ids, nothing added unless ``add_special`` (the BOS, and the
        EOS or SEP of a vocabulary that wants them); control-token text is parsed as
        control tokens only when ``special``."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        for _ in range(2):
            buf = (self._ll.llama_token * capacity)()
            n = int(
                self._ll.llama_tokenize(
                    self._vocab, data, len(data), buf, capacity, add_special, special
                )
            )
            if n >= 0:
                return list(buf[:n])
            capacity = -n
        raise RuntimeError("llama_tokenize kept asking for a larger buffer")

    def piece(self, token: int) -> bytes:
        """The bytes ``token`` stands for, control tokens rendered as their text.

        Grows the buffer as needed: some pieces are longer than 32 bytes (runs of
        spaces), which ``Llama.detokenize`` silently drops.
        """
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        size = 64
        while True:
            buf = ctypes.create_string_buffer(size)
            n = int(self._ll.llama_token_to_piece(self._vocab, token, buf, size, 0, True))
            if n >= 0:
                piece = buf.raw[:n]
                self._pieces[token] = piece
                return piece
            size = -n

    # -- context -------------------------------------------------------------------

    def batch(self) -> LlamaBatch:
        """A reusable batch of up to ``n_batch`` rows."""
        return LlamaBatch(self._ll, self.n_batch)

    def decode(self, batch: LlamaBatch) -> int:
        """Evaluate ``batch``; llama_decode's return code (0: done)."""
        return int(self._ll.llama_decode(self._ctx, batch.raw))

    def logits(self, row: int) -> bytes:
        """The raw logits (float32) of ``row`` of the last batch, as bytes: what tests
        compare bit for bit."""
        n_vocab = int(self._ll.llama_vocab_n_tokens(self._vocab))
        pointer = self._ll.llama_get_logits_ith(self._ctx, row)
        return ctypes.string_at(pointer, 4 * n_vocab)

    def set_abort(self, should_stop: Callable[[], bool] | None) -> None:
        """Make a running decode stop when ``should_stop()`` turns true (``None``
        removes it).

        The callback runs per graph node and takes the GIL, so it is installed for
        prefill steps only, where one decode can take seconds.
        """
        ll = self._ll
        if should_stop is None:
            self._abort = None
            no_callback = ctypes.cast(None, ll.ggml_abort_callback)  # type: ignore[arg-type]
            ll.llama_set_abort_callback(self._ctx, no_callback, None)
            return
        self._abort = ll.ggml_abort_callback(lambda _data: should_stop())
        ll.llama_set_abort_callback(self._ctx, self._abort, None)

    def cache_end(self, seq: int) -> int:
        """How many positions sequence ``seq`` holds (one past its last one)."""
        return int(self._ll.llama_memory_seq_pos_max(self._memory, seq)) + 1

    def cache_start(self, seq: int) -> int:
        """The first position sequence ``seq`` still holds (in a sliding-window cache,
        the oldest one not yet dropped; -1 when empty)."""
        return int(self._ll.llama_memory_seq_pos_min(self._memory, seq))

    def truncate(self, seq: int, keep: int) -> bool:
        """Drop every position of ``seq`` from ``keep`` on; false if the memory cannot
        drop a partial range (recurrent and hybrid models), in which case nothing changed."""
        return bool(self._ll.llama_memory_seq_rm(self._memory, seq, keep, -1))

    def clear(self, seq: int) -> None:
        """Empty sequence ``seq``."""
        self._ll.llama_memory_seq_rm(self._memory, seq, -1, -1)

    def copy(self, source: int, target: int) -> None:
        """Make ``target`` hold what ``source`` holds (a copy of its whole stream, done
        before the next decode)."""
        self._ll.llama_memory_seq_cp(self._memory, source, target, -1, -1)

    def save(self, seq: int) -> bytes:
        """The state (K/V cells) of sequence ``seq``, as bytes."""
        ll = self._ll
        size = int(ll.llama_state_seq_get_size(self._ctx, seq))
        buf = (ctypes.c_uint8 * size)()
        written = int(ll.llama_state_seq_get_data(self._ctx, buf, size, seq))
        return bytes(buf[:written])

    def restore(self, seq: int, data: bytes) -> bool:
        """Load a state saved by :meth:`save` into the (emptied) sequence ``seq``."""
        self.clear(seq)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        return int(self._ll.llama_state_seq_set_data(self._ctx, buf, len(data), seq)) > 0

    def embedding_context(self, pooling: int, n_batch: int) -> EmbeddingContext:
        """A context on these weights in embedding mode, pooling as ``pooling`` says
        (a ``LLAMA_POOLING_TYPE_*``; -1: as the model declares), ``n_batch`` tokens per
        step; freed with this backend."""
        if self.closed:
            raise ConfigurationError("the model is closed")
        context = EmbeddingContext(
            self._ll, self._model, pooling, n_batch, self.n_threads, self.n_threads_batch
        )
        self._embedding.append(context)
        return context

    def sampler(self, steps: Sequence[SamplerStep], grammar: str | None = None) -> Sampler:
        """A fresh sampler chain for one generation, constrained by ``grammar`` (GBNF)
        if set (see :class:`~cuca.engine.grammar.GrammarSampler`)."""
        return Sampler(self._ll, self._ctx, steps, (self._vocab, grammar) if grammar else None)


class Sampler:
    """A llama.cpp sampler chain; keep one per generation so its RNG state advances."""

    def __init__(
        self,
        ll: ModuleType,
        ctx: Any,
        steps: Sequence[SamplerStep],
        grammar: tuple[Any, str] | None = None,
    ) -> None:
        self._ll, self._ctx = ll, ctx
        self._constrained = None if grammar is None else GrammarSampler(ll, ctx, *grammar)
        self._chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        for step in steps:
            ll.llama_sampler_chain_add(self._chain, self._make(step))

    def _make(self, step: SamplerStep) -> Any:
        ll = self._ll
        if step.kind == "greedy":
            return ll.llama_sampler_init_greedy()
        if step.kind == "top_k":
            return ll.llama_sampler_init_top_k(int(step.value))
        if step.kind == "top_p":
            return ll.llama_sampler_init_top_p(float(step.value), 1)
        if step.kind == "temp":
            return ll.llama_sampler_init_temp(float(step.value))
        if step.kind == "dist":
            return ll.llama_sampler_init_dist(int(step.value))
        raise ValueError(f"unknown sampler step {step.kind!r}")

    def sample(self, row: int) -> int:
        """The next token from the logits of ``row`` of the last batch (also accepted by
        the chain, and by the grammar if there is one)."""
        if self._constrained is not None:
            return self._constrained.sample(self._chain, row)
        return int(self._ll.llama_sampler_sample(self._chain, self._ctx, row))

    def close(self) -> None:
        if self._constrained is not None:
            self._constrained.close()
        if self._chain is not None:
            self._ll.llama_sampler_free(self._chain)
            self._chain = None

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LlamaBatch:
    """A llama.cpp batch, allocated once and refilled every step."""

    def __init__(self, ll: ModuleType, capacity: int) -> None:
        self._ll = ll
        self.capacity = capacity
        self.raw = ll.llama_batch_init(capacity, 0, 1)
        self._free = weakref.finalize(self, ll.llama_batch_free, self.raw)

    def fill(self, rows: Sequence[Row]) -> None:
        """Make the batch hold ``rows`` (at most ``capacity``)."""
        raw = self.raw
        token, pos, n_seq_id, seq_id, logits = (
            raw.token, raw.pos, raw.n_seq_id, raw.seq_id, raw.logits
        )  # fmt: skip
        for i, (tok, position, seq, wanted) in enumerate(rows):
            token[i] = tok
            pos[i] = position
            n_seq_id[i] = 1
            seq_id[i][0] = seq
            logits[i] = wanted
        raw.n_tokens = len(rows)


class EmbeddingContext:
    """A second llama.cpp context on a loaded model's weights, in embedding mode, set up
    as llama-cpp-python's ``Llama(embedding=True)`` sets its own (``n_ctx`` = ``n_batch``
    = ``n_ubatch``, one unified K/V cache, as many sequences as rows or llama.cpp's
    maximum, no flash attention), so that the same texts in the same steps give the
    same vectors, bit for bit. Not thread-safe: one caller at a time."""

    def __init__(
        self,
        ll: ModuleType,
        model: Any,
        pooling: int,
        n_batch: int,
        n_threads: int,
        n_threads_batch: int,
    ) -> None:
        self._ll = ll
        params = ll.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = n_batch
        params.n_threads, params.n_threads_batch = n_threads, n_threads_batch
        params.pooling_type = pooling
        params.embeddings = True
        params.flash_attn_type = _FLASH_ATTN_DISABLED
        params.n_seq_max = min(n_batch, int(ll.llama_max_parallel_sequences()))
        params.kv_unified = True
        params.no_perf = True
        ctx = ll.llama_init_from_model(model, params)
        if not ctx:
            raise ConfigurationError("llama.cpp could not create an embedding context")
        self._ctx = ctx
        self._free = weakref.finalize(self, ll.llama_free, ctx)
        self._memory = ll.llama_get_memory(ctx)
        self.pooling = int(ll.llama_pooling_type(ctx))
        self.n_batch = int(ll.llama_n_batch(ctx))
        self.n_seq_max = int(ll.llama_n_seq_max(ctx))
        embd_out = getattr(ll, "llama_model_n_embd_out", ll.llama_model_n_embd)
        self.n_embd = int(embd_out(model))
        self._batch = LlamaBatch(ll, self.n_batch)

    def close(self) -> None:
        """Free the context (idempotent)."""
        self._free()

    def embed(self, sequences: Sequence[Sequence[int]]) -> list[bytes]:
        """Evaluate ``sequences`` (at most ``n_batch`` tokens, ``n_seq_max`` sequences)
        in one step from an empty cache, every row an output; the pooled vector of each
        as float32 bytes."""
        ll, ctx = self._ll, self._ctx
        rows = [
            (token, position, seq, True)
            for seq, tokens in enumerate(sequences)
            for position, token in enumerate(tokens)
        ]
        if self._memory:
            ll.llama_memory_clear(self._memory, True)
        self._batch.fill(rows)
        code = int(ll.llama_decode(ctx, self._batch.raw))
        if code != 0:
            raise RuntimeError(f"llama_decode failed in embedding mode ({code})")
        vectors = []
        for seq in range(len(sequences)):
            pointer = ll.llama_get_embeddings_seq(ctx, seq)
            if not pointer:  # no pooled vector (pooling none): never read through NULL
                raise RuntimeError(f"llama.cpp has no pooled embedding for sequence {seq}")
            vectors.append(ctypes.string_at(pointer, 4 * self.n_embd))
        return vectors
