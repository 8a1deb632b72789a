"""MCP servers' tools in the tool loop: ``async with McpServer.stdio(...) as server``,
then ``await server.tools()`` gives :class:`cuca.Tool` objects for :func:`cuca.run_tools`.

Needs the ``mcp`` extra (``pip install 'cuca[mcp]'``, the official MCP SDK); ``import
cuca`` does not load this package.
"""

from .server import McpServer as McpServer

__all__ = ["McpServer"]
