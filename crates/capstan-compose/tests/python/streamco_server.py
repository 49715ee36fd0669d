"""An independent StreamCo MCP server written with the Python `mcp` SDK (MCPServer, the
successor of FastMCP), serving Streamable HTTP on 127.0.0.1:<port>/mcp.

Usage: streamco_server.py PORT
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("streamco-python")


@server.tool()
def streams_list() -> dict:
    """List the streams of this project."""
    return {"streams": [{"name": "orders", "state": "Healthy"}]}


@server.tool()
def streams_get(name: str) -> dict:
    """Get one stream by name."""
    return {"name": name, "state": "Healthy", "server": "python"}


@server.tool()
def pipeline_diagnose(pipeline: str) -> str:
    """Diagnose a pipeline."""
    return f"python diagnosis of {pipeline}: healthy"


@server.tool()
def streams_export() -> str:
    """Not on the example allow-list."""
    return "exported"


@server.tool()
def resources_list() -> str:
    """Named like a base tool of the sidecar: only ever exposed with its server's prefix."""
    return "provider resources"


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
