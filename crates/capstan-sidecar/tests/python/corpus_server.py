"""The tool-search corpus's servers (e2e/fixtures/toolsearch/corpus.json), each at
127.0.0.1:<port>/<server>/mcp, written with the Python `mcp` SDK's low-level server: tools/list
answers a server's tools exactly as the corpus keeps them (real definitions of public MCP
servers); tools/call answers which server and tool were called with what — the test's oracle
that a tool found by search reached its own server.

Usage: corpus_server.py PORT CORPUS
"""

import contextlib
import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from mcp import types
from mcp.server.lowlevel import Server


def server_for(name: str, tools: list) -> Server:
    listed = [types.Tool.model_validate(tool) for tool in tools]

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx, params):
        called = {"server": name, "tool": params.name, "arguments": params.arguments or {}}
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(called))])

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


def app(corpus: dict) -> Starlette:
    servers = [server_for(s["name"], s["tools"]) for s in corpus["servers"]]
    mounts = [
        Mount(f"/{server.name}", app=server.streamable_http_app(json_response=True))
        for server in servers
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_):
        async with contextlib.AsyncExitStack() as stack:
            for server in servers:
                await stack.enter_async_context(server._session_manager.run())
            yield

    return Starlette(routes=mounts, lifespan=lifespan)


if __name__ == "__main__":
    with open(sys.argv[2]) as f:
        corpus = json.load(f)
    print(f"corpus_server: listening on http://127.0.0.1:{sys.argv[1]}", flush=True)
    uvicorn.run(app(corpus), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
