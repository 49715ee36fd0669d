"""An independent MCP client (the Python `mcp` SDK, default settings) talking to the sidecar
over its Unix socket: initialize, list tools, read the instructions, call one tool.

Usage: client.py SOCKET PROJECT TOKEN TOOL ARGUMENTS_JSON [MODE]
MODE is the SDK's connect mode: `auto` (the default: probes server/discover, 2026-07-28 where
the server offers it) or `legacy` (initialize, the session revisions).
Prints one JSON object: tools, instructions, protocol version, the call's result.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(
    socket: str, project: str, token: str, tool: str, arguments: str, mode: str = "auto"
) -> None:
    headers = {"X-Capstan-Project": project}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    http = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(uds=socket), headers=headers, timeout=30
    )
    async with http:
        transport = streamable_http_client("http://localhost/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            tools = await client.list_tools()
            result = await client.call_tool(tool, json.loads(arguments))
            print(
                json.dumps(
                    {
                        "protocolVersion": str(client.session.protocol_version)
                        if getattr(client.session, "protocol_version", None)
                        else None,
                        "tools": [t.name for t in tools.tools],
                        "schemas": [t.input_schema for t in tools.tools],
                        "instructions": client.instructions,
                        "isError": bool(result.is_error),
                        "structured": result.structured_content,
                        "text": [c.text for c in result.content if getattr(c, "text", None)],
                    }
                )
            )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
