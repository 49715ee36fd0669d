"""An independent MCP client (the Python `mcp` SDK) calling one tool through the sidecar's Unix
socket with a trace context of its own: a `traceparent` in the HTTP headers or in the call's
`params._meta`, as an instrumented assistant sends it.

Usage: traced_client.py SOCKET PROJECT TOKEN TOOL ARGUMENTS_JSON MODE CARRIER TRACEPARENT
MODE is the SDK's connect mode (`auto`: 2026-07-28 where offered; `legacy`: a session).
CARRIER is `header` or `meta`.
Prints one JSON object: whether the call failed, and its text.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(socket, project, token, tool, arguments, mode, carrier, traceparent):
    headers = {"X-Capstan-Project": project, "Authorization": f"Bearer {token}"}
    if carrier == "header":
        headers["traceparent"] = traceparent
    meta = {"traceparent": traceparent} if carrier == "meta" else None
    http = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(uds=socket), headers=headers, timeout=30
    )
    async with http:
        transport = streamable_http_client("http://localhost/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            result = await client.call_tool(tool, json.loads(arguments), meta=meta)
            print(json.dumps({
                "isError": bool(result.is_error),
                "text": [c.text for c in result.content if getattr(c, "text", None)],
                "structured": result.structured_content,
            }))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:9]))
