"""The interactive session of ``cuca chat``: a conversation kept across turns.

Each answer is appended to the conversation as one assistant message built from the
turn's merged blocks, so the next request repeats the whole history. With the local
engine this is what makes prefix reuse visible: every turn after the first reads most
of its prompt from the cache (``cache read`` in the usage line).

A session fed from a pipe (``cuca chat -i < prompts.txt``) echoes each prompt it read
on stdout as ``> prompt`` before its answer, so the output reads as the conversation
(on a terminal the user's own typing shows it; JSON lines are left as they are).

A turn that fails or is stopped with Ctrl-C leaves the conversation as it was before
the user's message, and the session goes on. Ctrl-D, ``/exit`` or ``/quit`` end it;
``/reset`` forgets the conversation. Ctrl-C at the prompt ends the session (exit 130).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

import trio

from cuca.client import CucaClient
from cuca.errors import CucaError
from cuca.stream import merge_blocks
from cuca.types import MessageRole, UnifiedMessage, UnifiedRequest

from .config import EXIT_OK
from .console import Console
from .render import Renderer
from .turn import exit_status, interruptible, loop_turn, stream_turn

if TYPE_CHECKING:
    from cuca.tools import Tool

__all__ = ["Session", "line_reader"]

PROMPT = "> "
QUIT = frozenset({"/exit", "/quit"})
RESET = "/reset"


def line_reader(console: Console, stdin: TextIO, stdin_tty: bool) -> Callable[[], str | None]:
    """A blocking function returning the user's next line, or ``None`` at end of input.

    On a terminal the prompt is shown (with readline line editing and history, see
    :mod:`.history`, when stdout is the terminal too); from a pipe, lines are read silently.
    """

    def read() -> str | None:
        try:
            if stdin_tty and console.out_tty:
                return input(PROMPT)
            if stdin_tty:
                console.err.write(PROMPT)
                console.err.flush()
            line = stdin.readline()
        except EOFError:
            return None
        return line.removesuffix("\n") if line else None

    return read


@contextmanager
def _terminal_restored(stdin: TextIO, stdin_tty: bool) -> Iterator[None]:
    """Put the terminal back as it was if the session ends inside a line edit (Ctrl-C
    at the prompt leaves the reading thread in ``input``, which changed the modes)."""
    saved = None
    if stdin_tty:
        try:
            import termios

            saved = termios.tcgetattr(stdin.fileno())
        except (ImportError, OSError, ValueError):
            saved = None
    try:
        yield
    finally:
        if saved is not None:
            import termios

            termios.tcsetattr(stdin.fileno(), termios.TCSADRAIN, saved)


class Session:
    """A conversation with one client, one turn per line read."""

    def __init__(
        self,
        client: CucaClient,
        start: UnifiedRequest,
        renderer: Renderer,
        console: Console,
        tools: Sequence[Tool] = (),
        echo: bool = False,
    ) -> None:
        self.client = client
        self.tools = tools
        self.echo = echo
        self.start = start
        self.request = start
        self.renderer = renderer
        self.console = console
        self.status = EXIT_OK

    async def run(
        self, first: str | None, read: Callable[[], str | None], stdin_tty: bool = False
    ) -> int:
        """Run turns until the input ends. Returns 0, or the worst status of a failed
        turn (1 at run time, 2 for configuration), for scripts that pipe a session."""
        if stdin_tty:
            self.console.status("/exit or Ctrl-D to quit, /reset to forget, Ctrl-C stops a turn")
        if first is not None and first.strip():
            await self.turn(first)
        with _terminal_restored(sys.stdin, stdin_tty):
            while (line := await trio.to_thread.run_sync(read, abandon_on_cancel=True)) is not None:
                text = line.strip()
                if text in QUIT:
                    break
                if text == RESET:
                    self.request = self.start
                    self.console.status("conversation cleared")
                elif text:
                    await self.turn(text)
        return self.status

    async def turn(self, text: str) -> None:
        """One exchange; the conversation grows only when the turn completed."""
        if self.echo:
            self.console.out.write(f"{PROMPT}{text}\n")
            self.console.out.flush()
        request = self.request.add_user_message(text)
        try:
            if self.tools:
                conversation, interrupted = await interruptible(
                    lambda: loop_turn(self.client, request, self.tools, self.renderer)
                )
            else:
                blocks, interrupted = await interruptible(
                    lambda: stream_turn(self.client, request, self.renderer)
                )
        except CucaError as error:
            self.renderer.failed(error)
            self.status = max(self.status, exit_status(error))
            return
        if interrupted:
            self.renderer.interrupted()
        elif self.tools:
            assert conversation is not None
            self.request = conversation
        else:
            assert blocks is not None
            answer = UnifiedMessage(MessageRole.ASSISTANT, merge_blocks(blocks))
            self.request = request.add_message(answer)
