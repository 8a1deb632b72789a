"""The tool loop: a turn, the tools it called run concurrently, the results sent back,
and again, until the model answers without calling a tool.

It sits above the client (any object with ``generate_stream``: a :class:`CucaClient`, a
:class:`FallbackClient`) and knows no stage and no vendor. The order the vendors need
in a follow-up request (Anthropic's signed thinking before its ``tool_use`` blocks,
DeepSeek's ``reasoning_content``, Gemini's ``thoughtSignature`` on its call) is kept by
appending each step's blocks exactly as they streamed, merged but never reordered; the
adapters do the rest.
"""

from __future__ import annotations

import json
import math
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import (
    AbstractContextManager,
    ExitStack,
    asynccontextmanager,
    contextmanager,
)
from typing import Any, Protocol, TypedDict

import attrs
import trio

from cuca._nursery import background_nursery
from cuca.assemble import BlockAssembler
from cuca.errors import (
    ConfigurationError,
    CucaError,
    OutputValidationError,
    ToolCallError,
    ToolLoopError,
)
from cuca.plugins import CucaPlugin, LoopObserver
from cuca.repair import feedback, sum_cache_usage, sum_usage
from cuca.schema import parse_output
from cuca.stream import Attempt, TurnClient
from cuca.tools.approval import Approver, decide, refusal
from cuca.tools.tool import ArgumentProblem, Tool, ToolArgumentsError, ToolFailed, as_tool
from cuca.types import (
    Block,
    MessageRole,
    PromptCacheUsage,
    TokenUsage,
    ToolCall,
    ToolResult,
    UnifiedRequest,
    UnifiedResponse,
)

__all__ = [
    "LoopObserver",
    "Step",
    "ToolLoopOptions",
    "ToolLoopStream",
    "TurnClient",
    "TurnStream",
    "run_tools",
    "sum_cache_usage",
    "sum_usage",
]


@attrs.frozen
class Step:
    """Yielded by the tool loop at the start of each step (``number`` counts from 1):
    the items after it, up to the next ``Step``, belong to that step."""

    number: int


LoopItem = Block | CucaError | Step


class TurnStream(Protocol):
    """What the loop reads a step from (a :class:`~cuca.ResponseStream`)."""

    async def receive_batch(self) -> Sequence[Block | CucaError]: ...

    @property
    def response(self) -> UnifiedResponse | None: ...


class ToolLoopOptions(TypedDict, total=False):
    """The options of :func:`run_tools`, as keyword arguments of the clients' method."""

    max_steps: int
    tool_timeout: float | None
    max_concurrency: int
    tracebacks: bool
    max_invalid_calls: int
    approve: Approver | None
    approval_timeout: float | None
    repair: int


class ToolLoopStream:
    """The items of every step of a tool loop, one at a time: a :class:`Step` marker,
    the step's blocks (and non-fatal error items) as they stream, then the
    :class:`~cuca.ToolResult` of each call as it completes. An error that ended a step
    is raised from the iteration; the loop stops there. The loop moves as it is read:
    a step's calls start once its last item has been taken.

    ``conversation`` is the request with every completed step's messages appended (the
    whole conversation once the stream has ended); ``usage`` the usage summed over the
    steps; ``responses`` each step's :class:`~cuca.UnifiedResponse`; ``complete`` is
    true when the last step answered without calling a tool (false when the loop
    stopped at ``max_steps``).
    """

    def __init__(self, receive: trio.MemoryReceiveChannel[Message], loop: _Loop):
        self._receive = receive
        self._loop = loop
        self._batch: Sequence[LoopItem] = ()
        self._index = 0
        self._step: _StepStream | None = None

    def __aiter__(self) -> ToolLoopStream:
        return self

    async def __anext__(self) -> LoopItem:
        while self._index >= len(self._batch):
            self._batch, self._index = await self._next_batch(), 0
        item = self._batch[self._index]
        self._index += 1
        return item

    async def receive_batch(self) -> Sequence[LoopItem]:
        """The items not yet taken, as they arrived: the rest of the current batch, or
        the next one (a step's network read or engine step, a :class:`Step` marker, the
        tool results). Raises ``StopAsyncIteration`` at the end, or the error that ended
        the loop, as iteration does."""
        while self._index >= len(self._batch):
            self._batch, self._index = await self._next_batch(), 0
        batch = self._batch[self._index :] if self._index else self._batch
        self._batch, self._index = (), 0
        return batch

    async def _next_batch(self) -> Sequence[LoopItem]:
        """The next batch: from the running step's own stream (read here, in the
        consumer's task, so that its items take no extra hop), else from the loop."""
        step = self._step
        if step is not None:
            try:
                batch = await step.stream.receive_batch()
            except (StopAsyncIteration, CucaError) as end:  # the loop task takes it on
                step.end(end)
                self._step = None
                return ()
            step.keep(batch)
            return batch
        try:
            message = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            if self._loop.error is not None:
                raise self._loop.error from None
            raise StopAsyncIteration from None
        if isinstance(message, _StepStream):
            self._step = message
            return ()
        return message

    @property
    def conversation(self) -> UnifiedRequest:
        return self._loop.conversation

    @property
    def responses(self) -> tuple[UnifiedResponse, ...]:
        return tuple(self._loop.responses)

    @property
    def usage(self) -> TokenUsage | None:
        return sum_usage(r.usage for r in self._loop.responses)

    @property
    def prompt_cache_usage(self) -> PromptCacheUsage | None:
        return sum_cache_usage(r.prompt_cache_usage for r in self._loop.responses)

    @property
    def complete(self) -> bool:
        return self._loop.complete

    @property
    def parsed(self) -> Any:
        """The last answer as a value when the request has an output schema and the
        answer fits it (as :attr:`cuca.Completion.parsed`), else ``None``."""
        return self._loop.parsed

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """Each answer given for the output schema, in order, with its error (``None``
        for the one that fit) and its step's response."""
        return tuple(self._loop.attempts)

    @property
    def output_error(self) -> OutputValidationError | None:
        """Why the last answer does not fit the output schema (without ``repair``)."""
        return self._loop.invalid_answer


class _StepStream:
    """A step's turn, handed by the loop task to the consumer, who reads it and says
    when (and how) it ended."""

    def __init__(self, stream: TurnStream) -> None:
        self.stream = stream
        self.blocks = BlockAssembler()  # the stream's own merging, as the deltas come
        self.malformed: dict[str, str] = {}  # call id -> the arguments as the model sent them
        self.error: BaseException | None = None
        self.ended = trio.Event()

    def keep(self, batch: Sequence[Block | CucaError]) -> None:
        """Keep ``batch``'s blocks for the assistant message, merged as they come by
        the same :class:`~cuca.assemble.BlockAssembler` as the stream's message.

        A call whose arguments were not a JSON object (a :class:`~cuca.ToolCallError`
        with an id and a name) stays in the message, with empty arguments, so that it
        can be answered: the model reads an error result and may call again. Without
        an id it cannot be answered and is left out.
        """
        if not any(isinstance(item, ToolCallError) for item in batch):
            self.blocks.feed(batch)  # error items skipped
            return
        for item in batch:
            if isinstance(item, ToolCallError):
                if item.tool_call_id is not None and item.name is not None:
                    self.blocks.add(ToolCall(item.tool_call_id, item.name, {}))
                    self.malformed[item.tool_call_id] = item.raw
            elif not isinstance(item, CucaError):
                self.blocks.add(item)

    def end(self, end: BaseException) -> None:
        if not isinstance(end, StopAsyncIteration):
            self.error = end
        self.ended.set()


Message = Sequence[LoopItem] | _StepStream
"""What the loop task sends the consumer: items of its own, or a step to read."""


@asynccontextmanager
async def run_tools(
    client: TurnClient,
    request: UnifiedRequest,
    tools: Iterable[Tool | Callable[..., Any]],
    *,
    max_steps: int = 8,
    tool_timeout: float | None = None,
    max_concurrency: int = 8,
    tracebacks: bool = False,
    max_invalid_calls: int = 3,
    approve: Approver | None = None,
    approval_timeout: float | None = None,
    repair: int = 0,
) -> AsyncIterator[ToolLoopStream]:
    """Run ``request`` on ``client`` with ``tools`` until the model stops calling them
    or ``max_steps`` steps have run.

    The tools' definitions are added to the request (a tool it already declares by
    name is not declared twice). After a step that called tools, the calls run
    concurrently, at most ``max_concurrency`` at once, each limited to
    ``tool_timeout`` seconds; a tool that raises, times out, is unknown or gets
    unusable arguments gives an error :class:`~cuca.ToolResult` (``Type: message``, the
    traceback too with ``tracebacks=True``) and the loop goes on. Leaving the block
    early cancels the running step and tools; all have ended when it returns.

    Each call's arguments are checked against its tool's JSON Schema before it runs; a
    call that breaks it does not run, and its error result lists every problem (path,
    expected, got) so that the model can call again. The ``max_invalid_calls + 1``-th
    such call of one tool ends the loop with :class:`~cuca.ToolLoopError`.

    A call of a tool that needs approval waits for ``approve`` (called with the call;
    async, or sync in a worker thread) at most ``approval_timeout`` seconds, while the
    other calls run; a denial, a failure or the timeout gives the model an error result
    and the tool does not run. Every decision is told to the observers
    (:meth:`~cuca.LoopObserver.approval`).

    With an output schema on the request, the last answer is parsed (``parsed``); with
    ``repair=N``, an answer that does not fit is sent back with its error quoted, up to
    N times (each a step of its own, not counted in ``max_steps``), and after the last
    failure :class:`~cuca.OutputValidationError` carries every attempt.
    """
    options = _Options(
        max_steps,
        tool_timeout,
        max_concurrency,
        tracebacks,
        max_invalid_calls,
        approve,
        approval_timeout,
        repair,
    )
    loop = _Loop(client, request, tools, options)
    send, receive = trio.open_memory_channel[Message](0)
    with receive:
        async with background_nursery() as nursery:
            nursery.start_soon(loop.run, send)
            yield ToolLoopStream(receive, loop)


@attrs.frozen
class _Options:
    """The options of one loop, as :func:`run_tools` documents them."""

    max_steps: int
    tool_timeout: float | None
    max_concurrency: int
    tracebacks: bool
    max_invalid_calls: int
    approve: Approver | None = None
    approval_timeout: float | None = None
    repair: int = 0

    def __attrs_post_init__(self) -> None:
        if self.max_steps < 1 or self.max_concurrency < 1:
            raise ConfigurationError("max_steps and max_concurrency must be at least 1")
        if self.max_invalid_calls < 0:
            raise ConfigurationError("max_invalid_calls must be 0 or more")
        if self.approval_timeout is not None and not self.approval_timeout >= 0:
            raise ConfigurationError("approval_timeout is seconds (0 or more), or None")
        if self.repair < 0:
            raise ConfigurationError("repair is a number of retries: 0 or more")


class _Loop:
    """The loop's state and its actor (one task; the calls of a step in a nursery)."""

    def __init__(
        self,
        client: TurnClient,
        request: UnifiedRequest,
        tools: Iterable[Tool | Callable[..., Any]],
        options: _Options,
    ) -> None:
        self.tools = _by_name(tools)
        self.client = client
        self.conversation = _declare(request, self.tools.values())
        self.max_steps = options.max_steps
        self.timeout = math.inf if options.tool_timeout is None else options.tool_timeout
        self.limiter = trio.CapacityLimiter(options.max_concurrency)
        self.tracebacks = options.tracebacks
        self.max_invalid = options.max_invalid_calls
        self.approve = options.approve
        self.approval_timeout = options.approval_timeout
        self.edited: dict[str, ToolCall] = {}  # this step's calls run with edited arguments
        self.repair = options.repair
        self.parsed: Any = None
        self.attempts: list[Attempt] = []
        self.invalid_answer: OutputValidationError | None = None
        self.responses: list[UnifiedResponse] = []
        self.malformed: dict[str, str] = {}  # this step's calls whose arguments were not JSON
        self.error: CucaError | None = None
        self.complete = False
        self.observers = _observers(client, self.conversation)
        self.invalid: Counter[str] = Counter()  # tool name -> invalid calls so far
        self.gave_up: ToolLoopError | None = None

    async def run(self, send: trio.MemorySendChannel[Message]) -> None:
        async with send:
            try:
                with self._watch(lambda o: o.run()):
                    number = tool_steps = 0
                    while tool_steps < self.max_steps:
                        number += 1
                        await send.send((Step(number),))
                        with self._watch(lambda o: o.step(number)):  # noqa: B023 (called at once)
                            calls = await self._step(send)
                            if not calls:
                                if self._answered():
                                    self.complete = True
                                    return
                                continue  # the answer is sent back to be repaired
                            tool_steps += 1
                            await self._run_calls(calls, send)
            except CucaError as exc:  # raised to the consumer once the channel is closed
                self.error = exc

    def _answered(self) -> bool:
        """Whether the last answer ends the loop: always without an output schema; with
        one, when it fits or the repairs are spent (after ``repair`` failed repairs,
        an :class:`~cuca.OutputValidationError` carrying every attempt is raised)."""
        spec = self.conversation.output_schema
        if spec is None:
            return True
        message = self.conversation.messages[-1]
        response = self.responses[-1] if self.responses else None
        try:
            self.parsed = parse_output(spec, message.text())
        except OutputValidationError as error:
            if response is not None:
                self.attempts.append(Attempt(message, error, response))
            if not self.repair:
                self.invalid_answer = error
                return True
            if len(self.attempts) > self.repair:
                raise OutputValidationError(
                    f"no answer fit after {len(self.attempts)} tries; the last: {error.message}",
                    error.raw,
                    tuple(self.attempts),
                ) from None
            self.conversation = self.conversation.add_user_message(feedback(error))
            return False
        if response is not None:
            self.attempts.append(Attempt(message, None, response))
        return True

    async def _step(self, send: trio.MemorySendChannel[Message]) -> list[ToolCall]:
        """Open one turn and hand its stream to the consumer, who reads it to its end;
        append its assistant message; return its calls."""
        async with self.client.generate_stream(self.conversation) as stream:
            step = _StepStream(stream)
            await send.send(step)
            await step.ended.wait()
        if isinstance(step.error, CucaError):
            raise step.error
        if stream.response is not None:
            self.responses.append(stream.response)
        self.malformed = step.malformed
        message = step.blocks.message()
        self.conversation = self.conversation.add_message(message)
        return [block for block in message.content if isinstance(block, ToolCall)]

    async def _run_calls(
        self, calls: list[ToolCall], send: trio.MemorySendChannel[Message]
    ) -> None:
        """Run every call concurrently; stream each result as it completes; append them
        in the order of the calls."""
        results: list[ToolResult] = [ToolResult(c.id, "not run", is_error=True) for c in calls]

        async def one(index: int, call: ToolCall) -> None:
            with ExitStack() as stack:
                done = [stack.enter_context(o.tool_call(call)) for o in self.observers]
                results[index], error_type = await self._result(call)
                for tell in done:
                    if tell is not None:
                        tell(results[index], error_type)
            await send.send((results[index],))

        self.edited = {}
        async with trio.open_nursery() as nursery:
            for index, call in enumerate(calls):
                nursery.start_soon(one, index, call)
        if self.edited:
            self.conversation = _with_edits(self.conversation, self.edited)
        for call, result in zip(calls, results, strict=True):
            self.conversation = self.conversation.add_tool_result(
                call.id, result.output, is_error=result.is_error, name=call.name
            )
        if self.gave_up is not None:
            raise self.gave_up

    @contextmanager
    def _watch(
        self, part: Callable[[LoopObserver], AbstractContextManager[object]]
    ) -> Iterator[None]:
        """Hold the observers' context managers of one part of the loop, in order."""
        with ExitStack() as stack:
            for observer in self.observers:
                stack.enter_context(part(observer))
            yield

    async def _result(self, call: ToolCall) -> tuple[ToolResult, str | None]:
        """The result of one call and, when it failed, the error's type; every failure
        is an error result, never raised."""
        tool = self.tools.get(call.name)
        if tool is None:
            return _failed(call, f"unknown tool: {call.name}", "unknown_tool")
        if call.id in self.malformed:
            raw = self.malformed[call.id]
            problem = ArgumentProblem("$", "a JSON object", json.dumps(raw))
            return self._invalid(call, f"arguments are not a JSON object: {raw}", (problem,))
        problems = tool.check(call.arguments)
        if problems:
            listed = "\n".join(f"- {problem}" for problem in problems)
            return self._invalid(call, f"invalid arguments for {call.name}:\n{listed}", problems)
        if tool.approval_needed(call.arguments):
            event = await decide(self.approve, call, self.approval_timeout)
            for observer in self.observers:
                observer.approval(event)
            if not event.ran:
                return _failed(call, refusal(event), "denied")
            if event.arguments is not None:
                problems = tool.check(event.arguments)
                if problems:
                    listed = "; ".join(map(str, problems))
                    return _failed(call, f"denied: the edited arguments are invalid: {listed}",
                                   "denied")
                call = attrs.evolve(call, arguments=event.arguments)
                self.edited[call.id] = call
        async with self.limiter:
            return await self._run(tool, call)

    async def _run(self, tool: Tool, call: ToolCall) -> tuple[ToolResult, str | None]:
        """Run one call whose arguments fit, within the tool timeout."""
        with trio.move_on_after(self.timeout) as scope:
            try:
                return ToolResult(call.id, await tool.call(call.arguments)), None
            except ToolArgumentsError as exc:
                problems = exc.problems or (ArgumentProblem("$", "what it takes", str(exc)),)
                return self._invalid(call, f"invalid arguments: {exc}", problems)
            except ToolFailed as exc:
                return _failed(call, exc.output, "tool_failed")
            except Exception as exc:  # a tool's failure is the model's to read
                return _failed(call, self._describe(exc), type(exc).__name__)
        assert scope.cancelled_caught
        return _failed(call, f"timed out after {self.timeout:g} s", "timeout")

    def _invalid(
        self, call: ToolCall, output: str, problems: tuple[ArgumentProblem, ...]
    ) -> tuple[ToolResult, str]:
        """The error result of a call whose arguments do not fit; past
        ``max_invalid_calls`` of one tool, the loop gives up once this step is answered."""
        self.invalid[call.name] += 1
        if self.invalid[call.name] > self.max_invalid and self.gave_up is None:
            count = self.invalid[call.name]
            self.gave_up = ToolLoopError(
                f"{call.name} was called with invalid arguments {count} times "
                f"(max_invalid_calls={self.max_invalid}); the last: "
                + "; ".join(map(str, problems)),
                call,
                problems,
            )
        return _failed(call, output, "invalid_arguments")

    def _describe(self, exc: Exception) -> str:
        if self.tracebacks:
            return "".join(traceback.format_exception(exc)).rstrip()
        text = str(exc)
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _with_edits(request: UnifiedRequest, edited: dict[str, ToolCall]) -> UnifiedRequest:
    """``request`` whose last assistant message carries the edited calls, so that the
    model is told what ran."""
    messages = list(request.messages)
    index = max(i for i, m in enumerate(messages) if m.role is MessageRole.ASSISTANT)
    message = messages[index]
    content = tuple(
        edited.get(b.id, b) if isinstance(b, ToolCall) else b for b in message.content
    )
    messages[index] = attrs.evolve(message, content=content)
    return attrs.evolve(request, messages=tuple(messages))


def _failed(call: ToolCall, output: str, error_type: str) -> tuple[ToolResult, str]:
    return ToolResult(call.id, output, is_error=True), error_type


def _observers(client: TurnClient, request: UnifiedRequest) -> list[LoopObserver]:
    """The loop observers of the client's plugins (a client without plugins has none),
    given the request with the client's provider, as its turns will send it."""
    plugins: Iterable[CucaPlugin] = getattr(client, "plugins", ())
    if not plugins:
        return []
    provider = getattr(client, "provider", None)
    if provider is not None:
        request = attrs.evolve(request, provider=provider)
    found = (plugin.observe_tools(request) for plugin in plugins)
    return [observer for observer in found if observer is not None]


def _by_name(tools: Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    by_name: dict[str, Tool] = {}
    for tool in map(as_tool, tools):
        if tool.name in by_name:
            raise ConfigurationError(f"two tools are named {tool.name!r}")
        by_name[tool.name] = tool
    return by_name


def _declare(request: UnifiedRequest, tools: Iterable[Tool]) -> UnifiedRequest:
    """``request`` with the definition of every tool it does not declare yet."""
    declared = {definition.name for definition in request.tools}
    for tool in tools:
        if tool.name not in declared:
            request = request.add_tool(tool.definition())
    return request
