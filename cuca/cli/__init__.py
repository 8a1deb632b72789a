"""The ``cuca`` command: chat with any backend from a terminal, inspect local models.

``cuca chat [PROMPT]`` streams one turn (or runs an interactive session) through a
:class:`~cuca.CucaClient`; ``cuca models inspect PATH`` reads a GGUF file's metadata.
The command reads its own ``CUCA_*`` variables; vendor keys come from the provider
table's names, as in the library. See
``docs/cli.md``.

Modules: :mod:`.options` (the parser), :mod:`.config` (flags and environment to
settings), :mod:`.chat`, :mod:`.session` and :mod:`.turn` (the chat command),
:mod:`.render` and :mod:`.jsonl` (output), :mod:`.models` (``models inspect``).
"""

from .main import main as main

__all__ = ["main"]
