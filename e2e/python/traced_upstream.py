"""An MCP server written with the Python `mcp` SDK that tells what trace context each call
reached it with: the `traceparent` HTTP header and `params._meta.traceparent`, as received.
Serves Streamable HTTP on 127.0.0.1:<port>/mcp.

Usage: traced_upstream.py PORT
"""

import json
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("traced")


@server.tool()
async def echo(text: str, ctx: Context) -> str:
    """Answers with the text and the trace context the call came with."""
    request = ctx.request_context.request
    header = request.headers.get("traceparent") if request is not None else None
    params = ctx.request_context.params or {}
    meta = (params.get("_meta") or {}).get("traceparent")
    return json.dumps({"text": text, "header": header, "meta": meta})


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
