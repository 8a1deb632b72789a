"""The entry point: parse the command line, run a command, turn failures into an exit
status and one line on stderr (never a traceback for an expected failure)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from cuca.errors import CucaError

from .config import EXIT_ERROR, EXIT_INTERRUPTED, CliError
from .console import Console
from .options import build_parser

__all__ = ["main"]


def _only(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The one ``kind`` error inside ``error`` (itself, or a group holding just it)."""
    if isinstance(error, kind):
        return error
    if isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        return _only(error.exceptions[0], kind)
    return None


def _silence_stdout() -> None:
    """After a closed pipe (``cuca chat ... | head -1``), let the interpreter exit
    without a second error while flushing stdout."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cuca`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    0 on success, 1 for runtime errors, 2 for bad flags or configuration (argparse
    exits with 2 itself), 130 when Ctrl-C stopped it.
    """
    args = build_parser().parse_args(argv)
    env = os.environ
    console = Console.system(env)
    try:
        if args.command == "chat":
            from .chat import run_chat

            return run_chat(args, env, console)
        if args.command == "serve":
            from .serve import run_serve

            return run_serve(args, env, console)
        if args.command == "logs":
            from .logs import run_logs

            return run_logs(args, console)
        from .models import run_models

        return run_models(args, console)
    except CliError as error:
        console.error(error.message)
        return error.status
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_ERROR
    except BaseException as error:
        if _only(error, KeyboardInterrupt) is not None:
            console.status("\ncuca: interrupted")
            return EXIT_INTERRUPTED
        found = _only(error, CucaError)
        if isinstance(found, CucaError):  # a library error that escaped a handler
            console.error(str(found))
            return EXIT_ERROR
        raise
