"""How a model family writes reasoning and tool calls in its raw output.

This is the contract between template analysis (which detects a family from a chat
template) and the streaming output parser (which recognises blocks in generated text).
:class:`OutputFormat` and :class:`ToolSyntax` are declared in :mod:`cuca.generation`
(the records of a generation name them) and re-exported here.
"""

from __future__ import annotations

import attrs

from cuca.generation import OutputFormat as OutputFormat
from cuca.generation import ToolSyntax as ToolSyntax

__all__ = ["Capabilities", "OutputFormat", "RenderedTurn", "ToolSyntax"]


@attrs.frozen
class Capabilities:
    """What a local model supports, derived from its chat template.

    ``reasoning``: it writes reasoning blocks. ``can_disable_thinking``: its template
    reads ``enable_thinking``. ``tools``: it has a tool syntax our parser understands.
    """

    reasoning: bool
    can_disable_thinking: bool
    tools: bool


@attrs.frozen
class RenderedTurn:
    """One rendering of a request through a chat template: the prompt ``text`` and the
    :class:`OutputFormat` of what the model will write after it."""

    text: str
    output_format: OutputFormat
