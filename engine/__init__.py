"""cuca.engine: the in-process llama.cpp engine.

Load a GGUF model with :meth:`LocalModel.load` and stream from it through
``CucaClient(provider=ProviderEndpoint.LOCAL, local_model=model)``. The parts are
usable alone: the chat template, the streaming output parser, the prefix-reuse plan.
"""

import atexit as _atexit
import sys as _sys
import typing as _typing

from .formats import Capabilities as Capabilities
from .formats import OutputFormat as OutputFormat
from .formats import ToolSyntax as ToolSyntax
from .model import DEFAULT_N_SEQ as DEFAULT_N_SEQ
from .model import LocalModel as LocalModel
from .model import default_model_path as default_model_path
from .model import default_threads as default_threads
from .output import OutputParser as OutputParser
from .prefix import ReusePlan as ReusePlan
from .prefix import plan_reuse as plan_reuse
from .records import GenerationEnd as GenerationEnd
from .records import GenerationStart as GenerationStart
from .sampling import SamplingConfig as SamplingConfig
from .template import ChatTemplate as ChatTemplate

__all__ = [
    "DEFAULT_N_SEQ",
    "Capabilities",
    "ChatTemplate",
    "GenerationEnd",
    "GenerationStart",
    "LocalModel",
    "OutputFormat",
    "OutputParser",
    "ReusePlan",
    "SamplingConfig",
    "ToolSyntax",
    "default_model_path",
    "default_threads",
    "plan_reuse",
]


def _close_llama_devnull() -> None:
    """llama-cpp-python opens ``/dev/null`` twice when it is imported (``llama_cpp._utils``'s
    ``outnull_file`` and ``errnull_file``) and never closes it: the interpreter then warns
    ``ResourceWarning: unclosed file <... name='/dev/null'>`` at exit. Close both at exit,
    before the interpreter finds them open (nothing uses them after)."""
    for file in _llama_devnull_files():
        file.close()


def _llama_devnull_files() -> list[_typing.Any]:
    """The two files llama-cpp-python left open, if it was imported (a test checks that
    nothing else is left open at the end of the suite)."""
    utils = _sys.modules.get("llama_cpp._utils")
    files = (getattr(utils, name, None) for name in ("outnull_file", "errnull_file"))
    return [file for file in files if file is not None and hasattr(file, "close")]


_atexit.register(_close_llama_devnull)
