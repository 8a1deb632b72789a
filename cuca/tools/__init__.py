"""Tools and the tool loop: Python functions a model can call, and ``run_tools``, which
streams every step, runs the calls, sends the results back and stops when the model
answers. A feature above the turn: it drives a client through ``generate_stream`` and
never reaches inside a turn."""

from cuca.tools.approval import Approval as Approval
from cuca.tools.tool import Tool as Tool
from cuca.tools.tool import ToolFailed as ToolFailed
