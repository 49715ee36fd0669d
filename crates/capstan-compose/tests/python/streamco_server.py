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


# Every resource read this server answered, by URI: what a test reads back (`reads_seen`) to
# show that a read Capstan refused never reached the server.
reads: dict[str, int] = {}


def _read(uri: str) -> None:
    reads[uri] = reads.get(uri, 0) + 1


@server.tool()
def reads_seen() -> dict:
    """The resource reads this server answered, by URI."""
    return {"reads": reads}


@server.resource("streamco://runbooks/lag", name="lag-runbook", mime_type="text/markdown")
def lag_runbook() -> str:
    _read("streamco://runbooks/lag")
    return "# Lag runbook (python)"


@server.resource("streamco://secret", name="secret", mime_type="text/plain")
def secret() -> str:
    _read("streamco://secret")
    return "not for the assistant"


@server.resource("streamco://streams/{name}", name="stream", mime_type="application/json")
def stream(name: str) -> str:
    _read(f"streamco://streams/{name}")
    return f'{{"name": "{name}", "server": "python"}}'


@server.prompt()
def triage(stream: str) -> str:
    """Triage a lagging stream."""
    return f"Triage the stream {stream}, served by python."


@server.prompt()
def internal_notes() -> str:
    """Not on any selector."""
    return "internal"


@server.completion()
async def complete(ref, argument, context):
    from mcp.types import Completion

    if argument.name in ("stream", "name"):
        names = ["orders", "clicks", "orders-eu"]
        return Completion(values=[n for n in names if n.startswith(argument.value)])
    return None


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
