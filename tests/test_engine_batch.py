"""Many conversations on one local model: turns decode together in one llama.cpp batch,
wait their turn in FIFO order beyond ``n_seq``, and each keeps its own exact output,
usage and warm history (real SmolLM2-135M GGUF; the batching claims also on Gemma 3 270M)."""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
import trio
from support.models import MODELS, load_model

from cuca.client import CucaClient
from cuca.engine import LocalModel, SamplingConfig
from cuca.engine import backend as backend_module
from cuca.types import ProviderEndpoint, Text, UnifiedRequest

SEED = 4321
ARCHIVE = "The archive keeps letters, ledgers and maps, each box labelled by year and town. " * 6


_SAMPLED: list[list[str]] = []
"""For each sampler chain, in the order they were made (one per turn): the logits each
of its tokens was drawn from, hashed. Equal outputs bit for bit means equal lists."""


@pytest.fixture(autouse=True, scope="module")
def _record_logits() -> Iterator[None]:
    original = backend_module.Sampler.sample

    def sample(self: backend_module.Sampler, row: int) -> int:
        ll, ctx = self._ll, self._ctx
        n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(ll.llama_get_model(ctx)))
        data = ctypes.string_at(ll.llama_get_logits_ith(ctx, row), 4 * n_vocab)
        if not hasattr(self, "_test_trace"):
            self._test_trace: list[str] = []
            _SAMPLED.append(self._test_trace)
        self._test_trace.append(hashlib.sha256(data).hexdigest())
        return original(self, row)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend_module.Sampler, "sample", sample)
        yield


def logits_since(mark: int) -> list[tuple[str, ...]]:
    """The logits of the turns sampled since ``len(_SAMPLED)`` was ``mark``, sorted (turns
    that ran together are compared as a set with the same turns alone)."""
    return sorted(tuple(trace) for trace in _SAMPLED[mark:])


def load(name: str = "smollm2", **kwargs: Any) -> LocalModel:
    options: dict[str, Any] = {"n_ctx": 1024, "sampling": SamplingConfig(seed=SEED)}
    options.update(kwargs)
    return load_model(name, **options)


@attrs.frozen
class Outcome:
    text: str
    prompt: int
    read: int
    write: int
    completion: int
    finish: str


def ask(text: str, max_tokens: int, temperature: float | None = None) -> UnifiedRequest:
    request = UnifiedRequest.new("smollm2").add_user_message(text).set_max_tokens(max_tokens)
    return request.set_temperature(temperature)


async def run(model: LocalModel, request: UnifiedRequest) -> Outcome:
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        async with client.generate_stream_with_response(request) as (stream, response):
            text = "".join([item.text async for item in stream if isinstance(item, Text)])
    result = response.value
    assert result is not None and result.usage is not None
    cache = result.prompt_cache_usage
    assert cache is not None
    usage = result.usage
    return Outcome(
        text,
        usage.prompt_tokens,
        cache.read_tokens,
        cache.write_tokens,
        usage.completion_tokens,
        str(result.finish_reason),
    )


async def run_together(model: LocalModel, requests: list[UnifiedRequest]) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(requests)

    async def one(index: int) -> None:
        outcomes[index] = await run(model, requests[index])

    async with trio.open_nursery() as nursery:
        for index in range(len(requests)):
            nursery.start_soon(one, index)
    assert all(outcome is not None for outcome in outcomes)
    return [outcome for outcome in outcomes if outcome is not None]


# four turns of different lengths: one long prompt (its prefill spans several steps
# while the others already generate), one greedy, the rest sampled with the seed
FOUR = [
    ask("Name three fruits.", 12),
    ask(f"{ARCHIVE}What does the archive keep?", 20),
    ask("Write a short poem about the sea.", 40, temperature=0.0),
    ask("Count from one to twenty.", 28),
]


_ALONE: dict[str, list[Outcome]] = {}
_ALONE_LOGITS: dict[str, list[tuple[str, ...]]] = {}


async def alone_on(name: str) -> list[Outcome]:
    """Each of FOUR on a cold model ``name`` of its own, one at a time (once a session);
    their logits in ``_ALONE_LOGITS``."""
    if name not in _ALONE:
        outcomes, mark = [], len(_SAMPLED)
        for request in FOUR:
            with load(name, n_seq=1) as model:
                outcomes.append(await run(model, request))
        _ALONE[name], _ALONE_LOGITS[name] = outcomes, logits_since(mark)
    return _ALONE[name]


@pytest.fixture(scope="module")
def alone() -> list[Outcome]:
    """Each of FOUR on a cold SmolLM2 of its own, one at a time."""
    return trio.run(alone_on, "smollm2")


@pytest.mark.parametrize("name", MODELS)
async def test_batch_four_concurrent_turns_equal_each_alone(name: str) -> None:
    alone = await alone_on(name)
    mark = len(_SAMPLED)
    with load(name, n_seq=4) as model:
        together = await run_together(model, FOUR)
        assert model.peak_concurrency == 4  # the four advanced in the same steps
    assert len(logits_since(mark)) == 4 and all(logits_since(mark))  # one trace per turn
    assert logits_since(mark) == _ALONE_LOGITS[name]  # bit for bit
    for mine, theirs in zip(together, alone, strict=True):
        assert mine == theirs  # text, exact usage and finish reason
    assert len({outcome.completion for outcome in together}) > 1
    assert all(outcome.read == 0 for outcome in together)  # all were cold


def replayed(question: str, answer: str, follow_up: str, max_tokens: int) -> UnifiedRequest:
    """A conversation carrying an earlier answer (its tokens are prefilled one per step,
    as generation evaluated them)."""
    request = ask(question, max_tokens).add_assistant_message(answer)
    return request.add_user_message(follow_up)


async def test_batch_turns_replaying_answers_equal_each_alone() -> None:
    requests = [
        replayed("Name a fruit.", "Apples are a popular fruit.", "Another one?", 12),
        replayed("Count to five.", "One, two, three, four, five.", "Now to ten.", 16),
        FOUR[0],
    ]
    alone_outcomes, mark = [], len(_SAMPLED)
    for request in requests:
        with load(n_seq=1) as model:
            alone_outcomes.append(await run(model, request))
    alone_logits, mark = logits_since(mark), len(_SAMPLED)
    with load(n_seq=3) as model:
        together = await run_together(model, requests)
        assert model.peak_concurrency == 3
    assert logits_since(mark) == alone_logits
    assert together == alone_outcomes


async def test_batch_prompts_of_one_length_prefill_in_one_step_and_equal_each_alone() -> None:
    requests = [ask("Name a fruit.", 10), ask("Name a river.", 14, temperature=0.0)]
    with load(n_seq=2) as model:
        lengths = {len(model.tokenize_prompt(request)) for request in requests}
        assert len(lengths) == 1  # their chunks go in the same steps
        mark = len(_SAMPLED)
        together = await run_together(model, requests)
    together_logits, mark = logits_since(mark), len(_SAMPLED)
    alone_outcomes = []
    for request in requests:
        with load(n_seq=1) as model:
            alone_outcomes.append(await run(model, request))
    assert logits_since(mark) == together_logits
    assert together == alone_outcomes


async def test_batch_a_late_turn_joins_running_ones(alone: list[Outcome]) -> None:
    """Turns that arrive while others generate join the running batch (their prefill
    chunks go between the others' tokens) and still give their output alone."""
    with load(n_seq=4) as model:
        outcomes: list[Outcome | None] = [None] * 4

        async def one(index: int, delay: float) -> None:
            await trio.sleep(delay)
            outcomes[index] = await run(model, FOUR[index])

        async with trio.open_nursery() as nursery:
            for index, delay in ((2, 0.0), (3, 0.0), (1, 0.15), (0, 0.3)):
                nursery.start_soon(one, index, delay)
    assert outcomes == alone


async def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (not for a delay: a busy machine takes longer to get a
    turn there)."""
    with trio.fail_after(60):
        while not condition():
            await trio.sleep(0.005)


async def queued(model: LocalModel, count: int) -> None:
    """Wait until ``count`` turns wait for a sequence."""
    await until(lambda: len(model._scheduler._waiting) >= count)


async def test_batch_turns_beyond_n_seq_wait_in_fifo_order() -> None:
    events: list[tuple[str, str]] = []
    started = trio.Event()

    async def turn(name: str, request: UnifiedRequest) -> None:
        async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
            async with client.generate_stream(request) as stream:
                async for _ in stream:
                    if (("first", name)) not in events:
                        events.append(("first", name))
                        started.set()
        events.append(("end", name))

    with load(n_seq=1) as model:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(turn, "a", ask("Tell me a story.", 30))
            await started.wait()
            nursery.start_soon(turn, "b", ask("Say hi.", 5))
            await queued(model, 1)  # b waits for the sequence before c asks for it
            nursery.start_soon(turn, "c", ask("Say bye.", 5))
        assert model.peak_concurrency == 1
    assert events == [
        ("first", "a"), ("end", "a"), ("first", "b"), ("end", "b"), ("first", "c"), ("end", "c")
    ]  # fmt: skip


async def test_batch_cancelling_a_waiting_turn_costs_nothing(alone: list[Outcome]) -> None:
    """A turn dropped while it waits for a sequence never reaches the model: the running
    turn is undisturbed and the sequence holds nothing of the dropped prompt."""
    with load(n_seq=1) as model:
        async with trio.open_nursery() as nursery:
            running: list[Outcome] = []

            async def first() -> None:
                running.append(await run(model, FOUR[3]))

            nursery.start_soon(first)
            await until(lambda: bool(model._scheduler._active))  # it holds the sequence
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as waiting:
                    waiting.start_soon(run, model, ask("A turn nobody waits for.", 50))
                    await queued(model, 1)  # it waits for the sequence: drop it now
                    scope.cancel()
            assert scope.cancelled_caught
        assert running == [alone[3]]
        (held,) = model.sequences()
        prompt = tuple(model.tokenize_prompt(FOUR[3]))
        assert held[: len(prompt)] == prompt  # the running turn's, nothing else
        assert len(held) - len(prompt) in (alone[3].completion - 1, alone[3].completion)


@pytest.mark.parametrize("name", MODELS)
async def test_batch_dropping_one_turn_leaves_the_others_alone(name: str) -> None:
    """A turn dropped mid-answer stops; the two beside it give their output alone, and
    its sequence serves the next turn."""
    alone = await alone_on(name)
    with load(name, n_seq=3) as model:
        kept: list[Outcome | None] = [None, None]

        async def keep(slot: int, index: int) -> None:
            kept[slot] = await run(model, FOUR[index])

        dropped_after: list[int] = []

        async def drop() -> None:
            # dropped mid-answer, once the three have advanced in one step (when the
            # other two join depends on the machine's speed: not before 3 items)
            async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
                async with client.generate_stream(ask("Tell me everything.", 200)) as stream:
                    count = 0
                    async for _ in stream:
                        count += 1
                        if count >= 3 and model.peak_concurrency == 3:
                            dropped_after.append(count)
                            break

        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep, 0, 2)
            nursery.start_soon(drop)
            nursery.start_soon(keep, 1, 3)
        assert model.peak_concurrency == 3
        assert dropped_after, "the dropped turn ran to its end before the others joined it"
        assert kept == [alone[2], alone[3]]
        again = await run_together(model, FOUR[:3])  # every sequence serves again
    answers = [(o.text, o.completion, o.finish) for o in again]
    assert answers == [(o.text, o.completion, o.finish) for o in alone[:3]]


# -- a prefix cache per conversation ---------------------------------------------------


def conversation(topic: str) -> UnifiedRequest:
    system = f"You are an expert on {topic}. " * 8
    request = UnifiedRequest.new("smollm2").add_system_message(system)
    return request.add_user_message(f"Tell me one fact about {topic}.").set_max_tokens(12)


TOPICS = ("rivers", "volcanoes", "owls")


async def interleave(model: LocalModel, rounds: int = 2) -> list[list[Outcome]]:
    """Each conversation takes a turn, then the next, for ``rounds`` rounds."""
    requests = [conversation(topic) for topic in TOPICS]
    history: list[list[Outcome]] = [[] for _ in TOPICS]
    for _ in range(rounds):
        for index, request in enumerate(requests):
            outcome = await run(model, request)
            history[index].append(outcome)
            requests[index] = request.add_assistant_message(outcome.text).add_user_message(
                "And another?"
            )
    return history


async def test_batch_interleaved_conversations_each_stay_warm() -> None:
    with load(n_seq=3) as model:
        history = await interleave(model)
    for first, second in history:
        assert first.read == 0 or first.read < first.prompt // 2
        # the whole first turn (prompt and all but the last answer token) is reused
        assert second.read >= first.prompt + first.completion - 1
        assert second.prompt == second.read + second.write


async def test_batch_more_conversations_than_sequences_evict_the_least_recent() -> None:
    with load(n_seq=2) as model:
        history = await interleave(model)
    # round robin over two sequences: each return finds its conversation evicted by the
    # one before (least recently used), and re-reads all but the shared preamble
    for first, second in history:
        assert second.read < 20 < first.prompt
        assert second.prompt == second.read + second.write


async def test_batch_saved_states_bring_evicted_conversations_back() -> None:
    with load(n_seq=2, state_budget=64 << 20) as model:
        history = await interleave(model)
        assert model.saved_state_bytes > 0
    with load(n_seq=3) as roomy:
        reference = await interleave(roomy)
    for (first, second), (_, warm) in zip(history, reference, strict=True):
        assert second.read >= first.prompt + first.completion - 1  # restored, not re-read
        assert second == warm  # the same output and usage as with room for all three
