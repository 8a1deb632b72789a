"""cuca.engine: the in-process llama.cpp engine.

Load a GGUF model with :meth:`LocalModel.load` and stream from it through
``CucaClient(provider=ProviderEndpoint.LOCAL, local_model=model)``. The parts are
usable alone: the chat template, the streaming output parser, the prefix-reuse plan.
"""

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
from .records import TurnEnd as TurnEnd
from .records import TurnStart as TurnStart
from .sampling import SamplingConfig as SamplingConfig
from .template import ChatTemplate as ChatTemplate

__all__ = [
    "DEFAULT_N_SEQ",
    "Capabilities",
    "ChatTemplate",
    "LocalModel",
    "OutputFormat",
    "OutputParser",
    "ReusePlan",
    "SamplingConfig",
    "ToolSyntax",
    "TurnEnd",
    "TurnStart",
    "default_model_path",
    "default_threads",
    "plan_reuse",
]
