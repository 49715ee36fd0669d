"""A hand-written MCP server that answers `initialize` with the 2026-07-28 revision (a revision
without `initialize`) and asks its caller a question in the middle of a tool call, as a session
revision would: rmcp's client then treats it as a 2026-07-28 server. Its own record says which
answers reached it and with which session. Serves Streamable HTTP on 127.0.0.1:<port>/mcp.

Usage: odd_revision_server.py PORT [session|stateless]
With `session` it assigns a session id at `initialize` (Mcp-Session-Id: odd-session); with
`stateless` it assigns none and cannot be answered at all.
"""

import asyncio
import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODE = sys.argv[2] if len(sys.argv) > 2 else "session"
answers: dict = {}
received: list = []
waiting: dict = {}


def event(message: dict) -> bytes:
    return f"event: message\ndata: {json.dumps(message)}\n\n".encode()


async def mcp(request: Request):
    message = json.loads(await request.body())
    session = request.headers.get("mcp-session-id")
    if "method" not in message:  # an answer to our question
        received.append({"id": message.get("id"), "session": session, "result": message.get("result")})
        future = waiting.pop(message.get("id"), None)
        if future is not None and not future.done():
            future.set_result(message.get("result"))
        return Response(status_code=202)
    method, id_ = message["method"], message.get("id")
    if id_ is None:
        return Response(status_code=202)
    headers = {"mcp-session-id": "odd-session"} if MODE == "session" else {}
    if method == "initialize":
        return JSONResponse({"jsonrpc": "2.0", "id": id_, "result": {
            "protocolVersion": "2026-07-28", "capabilities": {"tools": {}},
            "serverInfo": {"name": "odd-revision", "version": "1"}}}, headers=headers)
    if method == "tools/list":
        return JSONResponse({"jsonrpc": "2.0", "id": id_, "result": {"tools": [
            {"name": "ask", "inputSchema": {"type": "object"}},
            {"name": "record", "inputSchema": {"type": "object"}}]}}, headers=headers)
    if method == "tools/call" and message["params"]["name"] == "record":
        text = json.dumps({"received": received})
        return JSONResponse({"jsonrpc": "2.0", "id": id_, "result": {
            "content": [{"type": "text", "text": text}]}}, headers=headers)
    if method == "tools/call":
        async def stream():
            future = asyncio.get_running_loop().create_future()
            waiting["q1"] = future
            yield event({"jsonrpc": "2.0", "id": "q1", "method": "elicitation/create", "params": {
                "message": "Proceed?", "requestedSchema": {"type": "object", "properties": {
                    "answer": {"type": "string"}}}}})
            try:
                answer = await asyncio.wait_for(future, 20)
                text = json.dumps({"answered": answer})
            except asyncio.TimeoutError:
                text = "no answer"
            yield event({"jsonrpc": "2.0", "id": id_, "result": {
                "content": [{"type": "text", "text": text}]}})
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)
    return JSONResponse({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": method}},
                        headers=headers)


async def other(request: Request):
    return Response(status_code=405 if request.method == "GET" else 200)


app = Starlette(routes=[Route("/mcp", mcp, methods=["POST"]), Route("/mcp", other, methods=["GET", "DELETE"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
