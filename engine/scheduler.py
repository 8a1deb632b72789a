"""The engine thread: every running turn of a model advances in one llama.cpp batch.

A model runs one thread while it has turns, and none when idle. Each step it retires
the turns whose consumers left, admits waiting turns in FIFO order while a sequence is
free (:mod:`~cuca.engine.sequences` says which one and what it reuses), then evaluates
one batch: one row per generating turn (the token it sampled last), plus prefill chunks
of the turns still reading their prompt, so a long prompt advances a chunk at a time
between the others' tokens instead of stalling them. After the step each turn samples
from its own row's logits with its own sampler chain, and hands the token's text to its
sink. A turn whose consumer is behind (its sink is full) sits out until it catches up;
the others go on.

Exactness (the exact mode): every prompt token is evaluated the way
:mod:`~cuca.engine.rows` gives it, whatever runs beside it. A token evaluated alone is
the only row of its sequence in its step (generation's rows, and prefill rows taken one
per step); tokens evaluated together go in steps of their own, in chunks of at least
:data:`~cuca.engine.rows.TOGETHER_ROWS` rows (a shorter chunk is padded with
placeholder rows after it, dropped from the cache right after the step), the same
number of rows for every sequence of the step (llama.cpp splits a step into equal
shares of its sequences, so a chunk of another size could leave a sequence short).
Each sequence has its own cells, and a row's arithmetic does not depend on the other
rows of its step (see docs/local-engine.md), so a turn gives the same bits beside
others as alone, warm as cold.
"""

from __future__ import annotations

import codecs
import threading
from collections import deque
from collections.abc import Callable, Sequence

import attrs

from cuca.errors import ConfigurationError, ProviderError, StreamIncomplete
from cuca.types import PromptCacheUsage

from .backend import DECODE_ABORTED, LlamaBackend, Row, Sampler
from .formats import OutputFormat
from .records import GenerationEnd, Held, TokenSink
from .rows import TOGETHER_ROWS, alone, key, token_of
from .sampling import SamplerStep
from .sequences import Placement, SavedStates, SequenceTable
from .stops import StopMatcher

__all__ = ["PreparedTurn", "Scheduler"]

IDLE_POLL = 0.05
"""Seconds the engine thread sleeps at most while every turn waits for its consumer."""

SHARED_CHUNK = 128
"""The most prompt tokens one prefill step evaluates while other turns wait for their
next token (a step of 128 rows of SmolLM2-135M takes about a second on one core)."""


def _run(turn: ScheduledTurn) -> int:
    """How many of ``turn``'s next prompt tokens go together (its run, from ``fed``)."""
    run = 1
    while turn.fed + run < len(turn.keys) and not alone(turn.keys[turn.fed + run]):
        run += 1
    return run


def _closed() -> StreamIncomplete:
    """How a turn ends when its model is closed under it: cut short, not finished."""
    return StreamIncomplete("the local model was closed during the turn")


@attrs.frozen
class PreparedTurn:
    """A request made ready for the engine thread (rendered and tokenized elsewhere).

    ``hidden`` are the control tokens whose text the output never shows (those that are
    not part of the output format's markers); ``grammar`` (GBNF) constrains the turn's
    sampling when the request asks for structured output or forces a tool call;
    ``stop`` are the request's stop sequences.
    """

    prompt: tuple[int, ...]
    output_format: OutputFormat
    thinking_enabled: bool
    steps: tuple[SamplerStep, ...]
    max_tokens: int | None
    hidden: frozenset[int]
    grammar: str | None = None
    alone: tuple[bool, ...] | None = None
    stop: tuple[str, ...] = ()

    def keys(self) -> tuple[int, ...]:
        """The prompt's cache keys: each token and whether it is evaluated alone (``alone``
        is set in the exact mode; otherwise every token goes with its neighbours)."""
        flags = self.alone or (False,) * len(self.prompt)
        return tuple(key(token, flag) for token, flag in zip(self.prompt, flags, strict=True))


class ScheduledTurn:
    """One submitted turn, from the engine thread's side (also its ticket)."""

    def __init__(self, prepared: PreparedTurn, sink: TokenSink) -> None:
        self.prepared = prepared
        self.keys = prepared.keys()
        self.sink = sink
        self.seq = -1
        self.fed = 0  # prompt tokens the sequence holds
        self.keep = 0  # prompt tokens reused from the cache
        self.count = 0  # tokens generated
        self.next_token: int | None = None  # sampled, to be evaluated next step
        self.row = -1  # the batch row whose logits it samples from after a step
        self.chunk = 0  # prompt tokens it added to the current step
        self.pad = 0  # placeholder rows after them, dropped from the cache after the step
        self.sampler: Sampler | None = None
        self.placement: Placement | None = None
        # ended (its sink finished), its last sampled token still to be evaluated
        self.trailing = False
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stops = StopMatcher(prepared.stop) if prepared.stop else None

    def end_text(self) -> None:
        """Send the text a stop-sequence check still holds (the answer ended without
        one)."""
        held = self.stops.flush() if self.stops is not None else ""
        if held:
            self.sink.token(Held(held))

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.prepared.prompt)

    def usage(self) -> PromptCacheUsage:
        return PromptCacheUsage(read_tokens=self.keep, write_tokens=self.fed - self.keep)


class Scheduler:
    """Runs the turns of one model: admission, placement, batched steps.

    ``exact`` evaluates each prompt token the way its key says (see the module doc);
    otherwise prefill chunks share steps with generating rows. ``state_budget`` is the
    bytes of RAM evicted sequences' states may take (0: none are saved).
    """

    def __init__(self, backend: LlamaBackend, *, exact: bool, state_budget: int = 0) -> None:
        self._backend = backend
        self.table = SequenceTable(backend.n_seq)
        self.saved = SavedStates(state_budget)
        self._exact = exact
        self._chunk_next = False  # in the exact mode, chunk steps alternate with row steps
        self._cond = threading.Condition()
        self._waiting: deque[ScheduledTurn] = deque()
        self._active: list[ScheduledTurn] = []
        self._thread: threading.Thread | None = None
        self._closing = False
        self._batch = backend.batch()
        self.last_seq = 0  # the sequence of the most recently admitted turn
        self.peak_turns = 0  # the most turns one step has advanced

    # -- any thread ------------------------------------------------------------------

    def submit(self, turn: ScheduledTurn) -> None:
        """Queue ``turn``; it is admitted when a sequence is free, in FIFO order."""
        with self._cond:
            if self._closing:
                raise ConfigurationError("the model is closed")
            self._waiting.append(turn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cuca-engine", daemon=True)
                self._thread.start()
            else:
                self._cond.notify()

    def withdraw(self, turn: ScheduledTurn) -> bool:
        """Take ``turn`` back if it still waits (true: it never ran and never will).
        Otherwise it runs: its sink's stop flag retires it at the next step."""
        with self._cond:
            try:
                self._waiting.remove(turn)
            except ValueError:
                self._cond.notify()
                return False
            return True

    @property
    def busy(self) -> bool:
        """Whether any turn waits or runs (an ended turn's last token included)."""
        with self._cond:
            return bool(self._active or self._waiting)

    def wake(self) -> None:
        """Something changed for a turn (a consumer caught up, or left)."""
        with self._cond:
            self._cond.notify()

    def close(self) -> None:
        """Stop every turn (each ends with StreamIncomplete) and wait for the thread to
        return."""
        with self._cond:
            self._closing = True
            thread = self._thread
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- the engine thread -----------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    self._retire_stopped()
                    if self._closing:
                        self._end_all(None)
                        self._thread = None
                        return
                    admitted = self._admit()
                    if not self._active and not self._waiting:
                        self._thread = None
                        return
                self._start(admitted)
                ready = [t for t in self._active if self._ready(t)]
                if not ready:
                    with self._cond:
                        self._cond.wait(IDLE_POLL)
                    continue
                self._step(ready)
        except BaseException as exc:  # a bug or a dead context: fail every turn, loudly
            with self._cond:
                self._end_all(exc)
                self._thread = None
            raise

    def _retire_stopped(self) -> None:
        for turn in [t for t in self._active if t.sink.stopped() and not t.trailing]:
            self._finish(turn, "cancelled")

    def _end_all(self, error: BaseException | None) -> None:
        for turn in list(self._active):
            if error is None:
                self._finish(turn, "cancelled")
            else:
                self._fail(turn, error)
        while self._waiting:
            turn = self._waiting.popleft()
            turn.sink.finish(error if error is not None else _closed())

    def _admit(self) -> list[ScheduledTurn]:
        """Waiting turns given a sequence, in FIFO order (called holding the lock)."""
        admitted: list[ScheduledTurn] = []
        while self._waiting and self.table.free():
            turn = self._waiting.popleft()
            placement = self.table.place(turn.keys, self.saved.tokens())
            turn.seq, turn.keep, turn.placement = placement.seq_id, placement.keep, placement
            self._active.append(turn)
            self.last_seq = turn.seq
            admitted.append(turn)
        return admitted

    def _start(self, admitted: Sequence[ScheduledTurn]) -> None:
        """Make each admitted turn's sequence hold its reused prefix; start its sampler."""
        for turn in admitted:
            assert turn.placement is not None
            try:
                self._place(turn, turn.placement)
                turn.sampler = self._backend.sampler(turn.prepared.steps, turn.prepared.grammar)
            except Exception as exc:
                self._fail(turn, exc)
                continue
            turn.fed = turn.keep

    def _place(self, turn: ScheduledTurn, placement: Placement) -> None:
        backend, seq = self._backend, placement.seq_id
        slot = self.table.slots[seq]
        if placement.evicted and self.saved.budget > 0:
            self.saved.put(placement.evicted, backend.save(seq))
        if placement.copy_from is not None:
            backend.copy(placement.copy_from, seq)
        elif placement.restore is not None:
            data = self.saved.take(placement.restore)
            if not backend.restore(seq, data):
                backend.clear(seq)
                slot.tokens.clear()
                turn.keep = 0
                return
        if backend.cache_end(seq) > turn.keep and not backend.truncate(seq, turn.keep):
            backend.clear(seq)  # this memory cannot drop a partial range: start over
            slot.tokens.clear()
            turn.keep = 0
        elif turn.keep and backend.cache_start(seq) > max(0, turn.keep - backend.n_swa):
            # a sliding-window cache dropped positions the next token still attends to
            # (never with llama.cpp's full-size window cache, which the engine asks for)
            backend.clear(seq)
            slot.tokens.clear()
            turn.keep = 0

    def _ready(self, turn: ScheduledTurn) -> bool:
        """Whether ``turn`` takes part in the next step: it prefills, or its consumer has
        room for another token."""
        return turn.prefilling or turn.trailing or not turn.sink.full()

    def _step(self, ready: list[ScheduledTurn]) -> None:
        backend = self._backend
        rows, stepping = self._exact_rows(ready) if self._exact else self._mixed_rows(ready)
        if not rows:
            return
        self.peak_turns = max(self.peak_turns, len(stepping))
        prefill = any(turn.chunk > 1 for turn in stepping)
        self._batch.fill(rows)
        if prefill:  # a prefill step may take seconds: let llama.cpp stop inside it
            backend.set_abort(self._abandoned(stepping))
        try:
            code = backend.decode(self._batch)
        finally:
            if prefill:
                backend.set_abort(None)
        if code != 0:
            self._failed_step(stepping, code)
            return
        for turn in stepping:
            tokens = self.table.slots[turn.seq].tokens
            if turn.chunk:
                tokens += turn.keys[turn.fed : turn.fed + turn.chunk]
                turn.fed += turn.chunk
                if turn.pad:
                    self._drop_placeholders(turn)
            elif turn.next_token is not None:
                tokens.append(key(turn.next_token, self._exact))  # generated: alone
                turn.next_token = None
        for turn in stepping:
            if turn.trailing:
                self._release(turn)  # its answer's last token is in its sequence now
            elif turn.row >= 0 and turn in self._active:
                self._advance(turn)

    def _drop_placeholders(self, turn: ScheduledTurn) -> None:
        """Take the placeholder rows of ``turn``'s last chunk out of its sequence."""
        turn.pad = 0
        if not self._backend.truncate(turn.seq, len(self.table.slots[turn.seq].tokens)):
            raise ProviderError(
                "local",
                "this model's memory cannot drop the placeholder rows of a short prefill "
                "step: load it with exact_reuse=False",
            )

    def _mixed_rows(self, ready: list[ScheduledTurn]) -> tuple[list[Row], list[ScheduledTurn]]:
        """One row per generating turn, then prefill chunks in the room left; the rows
        in ascending sequence order."""
        room = self._backend.n_batch - sum(t.next_token is not None for t in ready)
        chosen: list[tuple[ScheduledTurn, int]] = []  # (turn, prompt rows; 0: its token)
        for turn in ready:
            if turn.next_token is not None:
                chosen.append((turn, 0))
            elif turn.prefilling and room > 0:
                size = min(room, len(turn.keys) - turn.fed)
                chosen.append((turn, size))
                room -= size
        rows: list[Row] = []
        stepping: list[ScheduledTurn] = []
        # in ascending sequence order: llama.cpp splits a step of separate sequences'
        # caches into several where an id is out of order (four rows as [2, 0, 3, 1]
        # ran as two steps of two, a third more time per token in cuca serve --fast)
        for turn, size in sorted(chosen, key=lambda choice: choice[0].seq):
            if size:
                self._add_prompt(turn, size, rows, stepping)
            else:
                self._add_token(turn, rows, stepping)
        return rows, stepping

    def _exact_rows(self, ready: list[ScheduledTurn]) -> tuple[list[Row], list[ScheduledTurn]]:
        """Either one row per turn (its generated token, or its next prompt token that is
        evaluated alone), or chunks of prompt tokens evaluated together, in a step of
        their own, each sequence with the same number of rows, at least
        :data:`TOGETHER_ROWS` (placeholders pad a shorter chunk); the two kinds of step
        alternate while both have work."""
        single = [t for t in ready if t.next_token is not None or alone(t.keys[t.fed])]
        chunked = [t for t in ready if t.next_token is None and not alone(t.keys[t.fed])]
        rows: list[Row] = []
        stepping: list[ScheduledTurn] = []
        if chunked and (self._chunk_next or not single):
            self._chunk_next = False
            first = chunked[0]
            size = min(_run(first), self._backend.n_batch if len(ready) == 1 else SHARED_CHUNK)
            if size >= TOGETHER_ROWS:  # others join with chunks of that size
                group = [t for t in chunked[1:] if _run(t) >= size]
            else:  # a short chunk: others whose run is short too, each padded
                group = [t for t in chunked[1:] if _run(t) < TOGETHER_ROWS]
            room = max(1, self._backend.n_batch // max(size, TOGETHER_ROWS))
            for turn in sorted([first, *group[: room - 1]], key=lambda t: t.seq):
                self._add_prompt(turn, min(size, _run(turn)), rows, stepping, pad=True)
            return rows, stepping
        self._chunk_next = True
        for turn in sorted(single, key=lambda t: t.seq):  # llama.cpp keeps ascending ids together
            if turn.next_token is not None:
                self._add_token(turn, rows, stepping)
            else:
                self._add_prompt(turn, 1, rows, stepping)
        return rows, stepping

    def _add_token(
        self, turn: ScheduledTurn, rows: list[Row], stepping: list[ScheduledTurn]
    ) -> None:
        """The row of ``turn``'s last sampled token."""
        assert turn.next_token is not None
        rows.append((turn.next_token, len(self.table.slots[turn.seq].tokens), turn.seq, True))
        turn.row, turn.chunk = len(rows) - 1, 0
        stepping.append(turn)

    def _add_prompt(
        self,
        turn: ScheduledTurn,
        size: int,
        rows: list[Row],
        stepping: list[ScheduledTurn],
        *,
        pad: bool = False,
    ) -> None:
        """Rows for the next ``size`` prompt tokens of ``turn``; logits for the last one
        of the prompt. ``pad``: a chunk shorter than :data:`TOGETHER_ROWS` gets
        placeholder rows after it (positions the context has room for), so the step
        holds as many rows of the sequence as a longer chunk would."""
        end = turn.fed + size
        for position in range(turn.fed, end):
            wanted = position == len(turn.keys) - 1
            rows.append((token_of(turn.keys[position]), position, turn.seq, wanted))
        turn.row = len(rows) - 1 if end == len(turn.keys) else -1
        turn.chunk = size
        turn.pad = min(TOGETHER_ROWS - size, self._backend.n_ctx - end) if pad else 0
        filler = token_of(turn.keys[end - 1])
        rows += [(filler, end + i, turn.seq, False) for i in range(max(turn.pad, 0))]
        turn.pad = max(turn.pad, 0)
        stepping.append(turn)

    def _abandoned(self, stepping: list[ScheduledTurn]) -> Callable[[], bool]:
        def abandoned() -> bool:
            return self._closing or all(t.sink.stop_flag.is_set() for t in stepping)

        return abandoned

    def _failed_step(self, stepping: list[ScheduledTurn], code: int) -> None:
        """After a step llama.cpp did not finish: record what each sequence really
        holds, then retire the turns (cancelled if they were stopped, else failed)."""
        backend = self._backend
        for turn in stepping:
            slot = self.table.slots[turn.seq]
            expected = list(slot.tokens)
            if turn.chunk:
                expected += turn.keys[turn.fed : turn.fed + turn.chunk]
            elif turn.next_token is not None:
                expected.append(key(turn.next_token, self._exact))
            turn.pad = 0  # placeholders, if any, are past what it expects: dropped below
            end = min(backend.cache_end(turn.seq), len(expected))
            if not backend.truncate(turn.seq, end):
                backend.clear(turn.seq)
                end = 0
            slot.tokens = expected[:end]
            turn.fed = min(turn.fed, end)
            if code == DECODE_ABORTED or turn.sink.stopped():
                self._finish(turn, "cancelled")
            else:
                self._fail(turn, ProviderError("local", f"llama_decode failed with code {code}"))

    def _advance(self, turn: ScheduledTurn) -> None:
        """Sample ``turn``'s next token from its row, hand its text over, or end it."""
        prepared, backend = turn.prepared, self._backend
        limit = prepared.max_tokens
        if limit is not None and turn.count >= limit:
            self._finish(turn, "length")
            return
        if turn.sink.stopped():
            self._finish(turn, "cancelled")
            return
        assert turn.sampler is not None
        token = turn.sampler.sample(turn.row)
        if backend.is_eog(token):
            self._finish(turn, "stop")
            return
        turn.count += 1
        piece = b"" if token in prepared.hidden else backend.piece(token)
        text = turn.decoder.decode(piece)
        if turn.stops is not None:
            text, stopped = turn.stops.feed(text)
            if stopped:
                turn.sink.token(text)
                self._finish(turn, "stop_sequence")
                return
        turn.sink.token(text)
        full = len(self.table.slots[turn.seq].tokens) >= backend.n_ctx
        if turn.count == limit:
            if full:
                self._finish(turn, "length")
            else:
                self._end_then_evaluate(turn, token)
        elif full:
            self._finish(turn, "context_length")
        else:
            turn.next_token = token

    def _end_then_evaluate(self, turn: ScheduledTurn, token: int) -> None:
        """End a turn cut by ``max_tokens`` now, and evaluate its last token (alone, as
        generation evaluates every token) at the next step before freeing its sequence:
        the conversation's next turn, whose prompt carries the whole answer, then finds
        it all warm instead of spending a step of one row on that token."""
        turn.end_text()
        turn.sink.finish(GenerationEnd(turn.usage(), turn.count, "length"))
        if turn.sampler is not None:
            turn.sampler.close()
            turn.sampler = None
        turn.next_token, turn.trailing = token, True

    def _finish(self, turn: ScheduledTurn, reason: str) -> None:
        # what the decoder still holds is a character cut in half by the last token (the
        # cap, or the end of generation): dropped, never shown as U+FFFD; its tokens
        # still count in completion_tokens
        if turn.trailing:  # its sink has its end already
            self._release(turn)
            return
        if reason == "cancelled" and self._closing:
            self._fail(turn, _closed())
            return
        self._release(turn)
        turn.end_text()
        turn.sink.finish(GenerationEnd(turn.usage(), turn.count, reason))

    def _fail(self, turn: ScheduledTurn, error: BaseException) -> None:
        self._release(turn)
        if not turn.trailing:
            turn.sink.finish(error)

    def _release(self, turn: ScheduledTurn) -> None:
        if turn.sampler is not None:
            turn.sampler.close()
            turn.sampler = None
        if turn in self._active:
            self._active.remove(turn)
            self.table.release(turn.seq)
