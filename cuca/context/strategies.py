"""The compaction strategies: each a small class that shortens a request one way.

A strategy's ``apply(request, budget)`` returns a :class:`Shortened` (the shorter request
and what went, in words) or ``None`` when it has nothing to remove. It may count with
``budget.count`` to remove no more than needed. Every strategy keeps the rules of
:mod:`cuca.context.conversation`; write your own by subclassing :class:`Strategy`.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from cuca.types import (
    MessageRole,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

from .conversation import Layout, layout, tool_pairs

if TYPE_CHECKING:
    from cuca.stream import Completion

__all__ = [
    "ClampMessages",
    "ClearToolResults",
    "DropOldestTurns",
    "Shortened",
    "SlidingWindow",
    "Strategy",
    "SummariseOldestTurns",
    "Summariser",
    "TokenTarget",
]


@attrs.frozen
class TokenTarget:
    """The tokens a request may take (``tokens``), what a strategy that must remove
    something aims at (``goal``, at most ``tokens``: room for the next turns, so the
    same cut can be kept and a prefix cache stays warm), and how to count a request."""

    tokens: int
    count: Callable[[UnifiedRequest], Awaitable[int]]
    goal: int = attrs.field()

    @goal.default
    def _goal(self) -> int:
        return self.tokens

    async def fits(self, request: UnifiedRequest, limit: int | None = None) -> bool:
        """Whether ``request`` takes at most ``limit`` tokens (default: ``tokens``)."""
        return await self.count(request) <= (self.tokens if limit is None else limit)


@attrs.frozen
class Shortened:
    """A strategy's result: the shorter ``request`` and what it ``removed``, in words."""

    request: UnifiedRequest
    removed: str


class Strategy(abc.ABC):
    """One way to shorten a request."""

    name: str = "strategy"

    @abc.abstractmethod
    async def apply(self, request: UnifiedRequest, budget: TokenTarget) -> Shortened | None:
        """The shortened request, or ``None`` when there is nothing to remove."""


def _keep(request: UnifiedRequest, indices: Sequence[int]) -> UnifiedRequest:
    messages = request.messages
    return attrs.evolve(request, messages=tuple(messages[i] for i in indices))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class ClearToolResults(Strategy):
    """Replace the output of all but the last ``keep_last`` tool results with a marker
    saying what was removed; the calls, and the results' ids, stay."""

    name = "clear_tool_results"
    MARKER = "[tool result removed by compaction: {chars} characters]"

    def __init__(self, keep_last: int = 2) -> None:
        self.keep_last = keep_last

    async def apply(self, request: UnifiedRequest, budget: TokenTarget) -> Shortened | None:
        pairs = tool_pairs(request.messages)
        old = pairs[: max(len(pairs) - self.keep_last, 0)]
        messages = list(request.messages)
        cleared = chars = 0
        for i, j in old:
            block = messages[i].content[j]
            assert isinstance(block, ToolResult)
            if block.output.startswith("[tool result removed by compaction"):
                continue
            marker = self.MARKER.format(chars=len(block.output))
            content = list(messages[i].content)
            content[j] = attrs.evolve(block, output=marker)
            messages[i] = attrs.evolve(messages[i], content=tuple(content))
            cleared, chars = cleared + 1, chars + len(block.output)
        if not cleared:
            return None
        shorter = attrs.evolve(request, messages=tuple(messages))
        return Shortened(shorter, f"{_plural(cleared, 'tool result')} ({chars} characters)")


class ClampMessages(Strategy):
    """Cut every text and tool output longer than ``max_chars`` to its head and tail,
    with a line saying how much was cut. The first system message and the latest
    user message are left whole, and thinking is never touched (a signature covers
    its exact text)."""

    name = "clamp_messages"

    def __init__(self, max_chars: int = 2000) -> None:
        self.max_chars = max_chars

    def _cut(self, text: str) -> int:
        """How many characters clamping ``text`` cuts: all but ``max_chars // 2`` at
        each end (one fewer kept than ``max_chars`` when it is odd)."""
        return len(text) - 2 * (self.max_chars // 2)

    def _clamped(self, text: str) -> str:
        half = self.max_chars // 2
        cut = self._cut(text)
        return f"{text[:half]}\n[... {cut} characters cut by compaction ...]\n{text[-half:]}"

    async def apply(self, request: UnifiedRequest, budget: TokenTarget) -> Shortened | None:
        pieces = layout(request.messages)
        users = [i for i, m in enumerate(request.messages) if m.role is MessageRole.USER]
        pinned = {pieces.head, users[-1] if users else None}
        messages = list(request.messages)
        clamped = cut = 0
        for i, message in enumerate(messages):
            if i in pinned:
                continue
            content = list(message.content)
            for j, block in enumerate(content):
                if isinstance(block, Text) and len(block.text) > self.max_chars:
                    content[j] = Text(self._clamped(block.text))
                    cut += self._cut(block.text)
                elif isinstance(block, ToolResult) and len(block.output) > self.max_chars:
                    content[j] = attrs.evolve(block, output=self._clamped(block.output))
                    cut += self._cut(block.output)
                else:
                    continue
                clamped += 1
            messages[i] = attrs.evolve(message, content=tuple(content))
        if not clamped:
            return None
        shorter = attrs.evolve(request, messages=tuple(messages))
        return Shortened(shorter, f"{_plural(clamped, 'block')} clamped ({cut} characters)")


def _dropped(pieces: Layout, turns: int, request: UnifiedRequest) -> UnifiedRequest:
    return _keep(request, pieces.kept(pieces.turns[turns:]))


class DropOldestTurns(Strategy):
    """Remove the oldest turns: as few as bring the request to the budget's ``goal``
    (found by bisection: a handful of counts, whatever the length), or all of them
    when none is enough. The cut is kept for the next requests of the same
    conversation while it still fits, so their prompts share a prefix."""

    name = "drop_oldest_turns"

    def __init__(self) -> None:
        self._last: tuple[str, int] | None = None  # the dropped turns' digest, how many

    async def apply(self, request: UnifiedRequest, budget: TokenTarget) -> Shortened | None:
        pieces = layout(request.messages)
        if not pieces.turns:
            return None
        turns = await self._kept_cut(pieces, request, budget)
        if turns is None:
            low, high = 1, len(pieces.turns)
            everything = _dropped(pieces, high, request)
            # aim at the goal; at the budget itself when even the goal is out of reach
            limit = budget.goal if await budget.fits(everything, budget.goal) else budget.tokens
            while low < high:  # the fewest turns whose removal reaches the limit
                middle = (low + high) // 2
                if await budget.fits(_dropped(pieces, middle, request), limit):
                    high = middle
                else:
                    low = middle + 1
            turns = low
        self._last = (_digest(request, pieces.turns[:turns]), turns)
        gone = sum(len(t) for t in pieces.turns[:turns])
        removed = f"{_plural(turns, 'oldest turn')} ({_plural(gone, 'message')})"
        return Shortened(_dropped(pieces, turns, request), removed)

    async def _kept_cut(
        self, pieces: Layout, request: UnifiedRequest, budget: TokenTarget
    ) -> int | None:
        """The previous cut, when this request starts with the same turns and still fits."""
        if self._last is None:
            return None
        digest, turns = self._last
        if turns > len(pieces.turns) or _digest(request, pieces.turns[:turns]) != digest:
            return None
        return turns if await budget.fits(_dropped(pieces, turns, request)) else None


def _digest(request: UnifiedRequest, turns: Sequence[tuple[int, ...]]) -> str:
    """A digest of the messages of ``turns``: which turns a cut or a summary covers."""
    messages = [request.messages[i] for turn in turns for i in turn]
    return hashlib.sha256(_transcript(messages).encode()).hexdigest()


class SlidingWindow(Strategy):
    """Keep the last ``last`` messages (and the first system message, and the latest
    turn whole); turns that reach past the window go whole."""

    name = "sliding_window"

    def __init__(self, last: int = 20) -> None:
        self.last = last

    async def apply(self, request: UnifiedRequest, budget: TokenTarget) -> Shortened | None:
        pieces = layout(request.messages)
        start = len(request.messages) - self.last
        kept = [t for t in pieces.turns if t[0] >= start]
        if len(kept) == len(pieces.turns):
            return None
        gone = sum(len(t) for t in pieces.turns) - sum(len(t) for t in kept)
        return Shortened(_keep(request, pieces.kept(kept)), f"{_plural(gone, 'message')}")


class Summariser(Protocol):
    """What writes a summary: any cuca client (the local engine's included)."""

    async def generate(self, request: UnifiedRequest) -> Completion: ...


SUMMARY_PREFIX = "Summary of the earlier conversation:"


class SummariseOldestTurns(Strategy):
    """Replace the oldest turns (all but the last ``keep_turns``) with one system
    message holding a summary that ``client`` writes (``model`` names its model). The
    summary is kept and reused while it covers the same turns, so a growing
    conversation asks for a new one only when more turns must go."""

    name = "summarise_oldest_turns"
    INSTRUCTIONS = (
        "Summarise this conversation for whoever continues it: the facts, decisions, "
        "names and numbers that matter, in a few short sentences."
    )

    def __init__(
        self, client: Summariser, model: str, *, keep_turns: int = 2, max_tokens: int = 256
    ) -> None:
        self.client = client
        self.model = model
        self.keep_turns = keep_turns
        self.max_tokens = max_tokens
        self.cache: dict[str, str] = {}
        self.written = 0
        """How many summaries the client was asked for (reuses do not count)."""

    async def apply(self, request: UnifiedRequest, budget: TokenTarget) -> Shortened | None:
        pieces = layout(request.messages)
        covered = pieces.turns[: max(len(pieces.turns) - self.keep_turns, 0)]
        if not covered:
            return None
        old = [request.messages[i] for turn in covered for i in turn]
        key = _digest(request, covered)
        if key not in self.cache:
            self.cache[key] = await self._summary(old)
            self.written += 1
        summary = UnifiedMessage(MessageRole.SYSTEM, (Text(f"{SUMMARY_PREFIX} {self.cache[key]}"),))
        indices = pieces.kept(pieces.turns[len(covered) :])
        messages = [request.messages[i] for i in indices]
        at = 1 if pieces.head is not None else 0
        messages.insert(at, summary)
        shorter = attrs.evolve(request, messages=tuple(messages))
        removed = (
            f"{_plural(len(covered), 'oldest turn')} ({_plural(len(old), 'message')}) summarised"
        )
        return Shortened(shorter, removed)

    async def _summary(self, old: Sequence[UnifiedMessage]) -> str:
        ask = (
            UnifiedRequest.new(self.model)
            .add_system_message(self.INSTRUCTIONS)
            .add_user_message(_transcript(old))
            .set_max_tokens(self.max_tokens)
        )
        done = await self.client.generate(ask)
        return done.text.strip() or "(no summary)"


def _transcript(messages: Sequence[UnifiedMessage]) -> str:
    """The messages as plain lines for the summariser: text, calls and results; thinking
    is left out (it is the model's own, and may be signed)."""
    lines = []
    for message in messages:
        parts = []
        for block in message.content:
            if isinstance(block, Text):
                parts.append(block.text)
            elif isinstance(block, ToolCall):
                parts.append(f"[called {block.name} {block.arguments}]")
            elif isinstance(block, ToolResult):
                parts.append(f"[result: {block.output}]")
            elif not isinstance(block, Thinking):
                parts.append("[image]")
        lines.append(f"{message.role.value}: {' '.join(parts)}")
    return "\n".join(lines)
