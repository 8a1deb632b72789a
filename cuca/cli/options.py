"""The command line of ``cuca``: subcommands and flags, parsed by argparse.

Only the shape of the command line lives here. What a flag means once it meets the
environment (defaults per provider, API keys, which flags fit which provider) is
decided in :mod:`cuca.cli.config`, so that the parser stays a plain table of flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from cuca.providers.table import ENDPOINTS

__all__ = ["PROVIDER_NAMES", "THINK_LEVELS", "build_parser"]

PROVIDER_NAMES = tuple(info.cli_name for info in ENDPOINTS)
"""The names ``--provider`` and ``CUCA_PROVIDER`` accept, from the provider table
(``ProviderEndpoint.parse`` also takes each endpoint's kind, the aliases and dashes)."""

THINK_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")


def _number(kind: Callable[[str], float], minimum: float, what: str) -> Callable[[str], float]:
    """An argparse ``type`` that reads a number no smaller than ``minimum``."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is below {minimum:g}")
        return value

    return parse


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return int(_number(int, minimum, "a whole number")(text))

    return parse


def _add_chat(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = commands.add_parser(
        "chat",
        allow_abbrev=False,
        help="stream one turn, or run an interactive session",
        description=(
            "Stream one turn for PROMPT. With no PROMPT, read it from stdin when stdin is "
            "not a terminal, else start an interactive session (also with --interactive)."
        ),
    )
    chat.add_argument("prompt", nargs="?", metavar="PROMPT", help="the user message")
    chat.add_argument("-i", "--interactive", action="store_true", help="keep a conversation")
    chat.add_argument("--provider", help="one of " + ", ".join(PROVIDER_NAMES))
    chat.add_argument("--base-url", help="the server's base URL (HTTP providers)")
    chat.add_argument("--model", help="the model name sent to the provider")
    chat.add_argument("--api-key", help="API key (default: the vendor's env variable)")
    chat.add_argument("--system", help="a system message")
    chat.add_argument("--max-tokens", type=_count(1), metavar="N", help="cap on output tokens")
    chat.add_argument("--temperature", type=_number(float, 0.0, "a number"), metavar="T")
    chat.add_argument("--think", choices=THINK_LEVELS, help="reasoning off, or an effort level")
    chat.add_argument("--route", choices=("chat", "completion"), help="llama.cpp route")
    chat.add_argument("--model-path", metavar="GGUF", help="a GGUF file (local provider)")
    chat.add_argument(
        "--timeout",
        type=_number(float, 0.001, "a number of seconds"),
        metavar="S",
        help="connect/read/write timeout in seconds (HTTP providers; default: none)",
    )
    chat.add_argument(
        "--retries",
        type=_count(0),
        metavar="N",
        help="retries before the first byte of an answer (HTTP providers; default: 2)",
    )
    chat.add_argument("--threads", type=_count(1), metavar="N", help="CPU threads")
    chat.add_argument("--ctx", type=_count(1), metavar="N", help="context size (local)")
    chat.add_argument(
        "--fast",
        action="store_true",
        default=None,
        help="trade bit-exact reuse for speed: flash attention, any cached token reused (local)",
    )
    chat.add_argument(
        "--chat-template-file", metavar="FILE", help="a jinja chat template (local provider)"
    )
    chat.add_argument("--json", action="store_true", help="one JSON line per stream item")
    chat.add_argument(
        "--no-history",
        action="store_true",
        help="keep no line history of the interactive session (also CUCA_HISTORY=off)",
    )
    chat.add_argument(
        "--log", metavar="PATH", help="record every turn in this session log (see cuca logs)"
    )
    chat.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar='"COMMAND ARGS"',
        help="start an MCP server on stdio and give the model its tools (repeatable)",
    )
    chat.add_argument(
        "--mcp-http",
        action="append",
        default=[],
        metavar="URL",
        help="give the model the tools of the MCP server at URL (streamable HTTP; repeatable)",
    )


def _add_models(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = commands.add_parser("models", help="look at local model files", allow_abbrev=False)
    actions = models.add_subparsers(dest="action", metavar="ACTION", required=True)
    inspect = actions.add_parser(
        "inspect",
        allow_abbrev=False,
        help="what the engine reads from a GGUF file",
        description="Print a GGUF file's architecture, context length, chat template family "
        "and capabilities, read from its metadata without loading the weights.",
    )
    inspect.add_argument("path", metavar="PATH", help="a GGUF file")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")


def _add_logs(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    logs = commands.add_parser(
        "logs",
        allow_abbrev=False,
        help="list or show the turns of a session log",
        description="List the turns recorded in a SQLite session log (cuca.SessionLog), "
        "or show turn ID in full.",
    )
    logs.add_argument("path", metavar="PATH", help="the session log file")
    logs.add_argument("id", nargs="?", type=_count(1), metavar="ID", help="a turn to show")
    logs.add_argument("--limit", type=_count(1), metavar="N", help="only the last N turns")
    logs.add_argument("--json", action="store_true", help="one JSON object per turn")
    logs.add_argument("--raw", action="store_true", help="with --json: the response bytes too")


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        allow_abbrev=False,
        help="serve a model on the OpenAI and Anthropic wires",
        description=(
            "Serve the local engine (MODEL, a GGUF file; none: the default model) or, with "
            "--provider, one remote backend as a gateway, on POST /v1/chat/completions, "
            "/v1/messages, /v1/messages/count_tokens and /v1/responses. The first line "
            "printed is the server's URL."
        ),
    )
    serve.add_argument("path", nargs="?", metavar="MODEL", help="a GGUF file (local engine)")
    serve.add_argument("--config", metavar="TOML", help="model names mapped to backends")
    gateway = "serve this backend as a gateway: " + ", ".join(PROVIDER_NAMES)
    serve.add_argument("--provider", help=gateway)
    serve.add_argument("--base-url", help="the gateway's upstream base URL")
    serve.add_argument("--model", help="the model name served (local: the file's name)")
    serve.add_argument("--host", help="the address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=_count(0), metavar="N", help="the port (0: any free one)")
    serve.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="a key clients must send (repeatable; also CUCA_SERVE_API_KEYS)",
    )
    serve.add_argument(
        "--no-api-key",
        dest="allow_no_key",
        action="store_true",
        help="serve a non-loopback --host without any key",
    )
    serve.add_argument("--threads", type=_count(1), metavar="N", help="CPU threads")
    serve.add_argument("--ctx", type=_count(1), metavar="N", help="context size (local)")
    serve.add_argument(
        "--fast",
        action="store_true",
        default=None,
        help="trade bit-exact reuse for speed: flash attention, any cached token reused (local)",
    )
    serve.add_argument(
        "--parallel", type=_count(1), metavar="N", help="conversations decoded together (local)"
    )
    serve.add_argument(
        "--chat-template-file", metavar="FILE", help="a jinja chat template (local engine)"
    )
    serve.add_argument(
        "--timeout", type=_number(float, 0.001, "a number of seconds"), metavar="S",
        help="upstream timeout in seconds (gateway)",
    )
    serve.add_argument("--retries", type=_count(0), metavar="N", help="upstream retries (gateway)")


def build_parser() -> argparse.ArgumentParser:
    """The ``cuca`` parser: ``cuca chat ...``, ``cuca models inspect ...``, ``cuca logs ...``."""
    parser = argparse.ArgumentParser(
        prog="cuca",
        allow_abbrev=False,  # --max-token is a typo, not --max-tokens
        description="Chat with any LLM backend cuca supports, or inspect a local model.",
    )
    from cuca import __version__

    parser.add_argument("--version", action="version", version=f"cuca {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_chat(commands)
    _add_models(commands)
    _add_logs(commands)
    _add_serve(commands)
    return parser
