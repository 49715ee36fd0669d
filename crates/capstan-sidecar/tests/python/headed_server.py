"""A hand-written MCP server of 2026-07-28 alone whose tools mark arguments with `x-mcp-header`:
`region_of` marks a string argument as a client should, `tags_of` marks an array, which the
rules forbid (a header carries one primitive). It refuses `initialize` as a server without it
does, and every tool call answers with the `Mcp-*` headers its request carried — the test's
oracle for what reached it. Serves Streamable HTTP on 127.0.0.1:<port>/mcp.

Usage: headed_server.py PORT
"""

import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOOLS = [
    {"name": "region_of", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"}}}},
    {"name": "tags_of", "inputSchema": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "x-mcp-header": "Tags"}}}},
]
# Every method the server was asked, in order.
asked: list = []


async def mcp(request: Request):
    message = json.loads(await request.body())
    method, id_ = message.get("method"), message.get("id")
    asked.append(method)
    if id_ is None:
        return Response(status_code=202)

    def answer(result):
        return JSONResponse({"jsonrpc": "2.0", "id": id_, "result": result})

    if method == "server/discover":
        return answer({"resultType": "complete", "supportedVersions": ["2026-07-28"],
                       "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "private",
                       "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "headed", "version": "1"}}})
    if method == "tools/list":
        return answer({"resultType": "complete", "tools": TOOLS})
    if method == "tools/call":
        headers = {k: v for k, v in request.headers.items() if k.startswith("mcp-")}
        text = json.dumps({"headers": headers, "asked": asked})
        return answer({"resultType": "complete", "content": [{"type": "text", "text": text}]})
    return JSONResponse({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": method}})


app = Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
