"""MCP servers' tools in the tool loop: ``async with McpServer.stdio(...) as server``,
then ``await server.tools()`` gives :class:`cuca.Tool` objects for :func:`cuca.run_tools`.

Needs the ``mcp`` extra (``pip install 'cuca[mcp]'``, the official MCP SDK); ``import
cuca`` does not load this package.
"""

try:
    import mcp as _mcp  # noqa: F401  (the SDK: checked first, to say what is missing)
except ImportError as _missing:
    raise ImportError(
        f"cuca.mcp needs the MCP SDK: pip install 'cuca[mcp]' ({_missing})"
    ) from _missing

from .server import McpServer as McpServer

__all__ = ["McpServer"]
