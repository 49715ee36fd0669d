"""An MCP server written with the Python `mcp` SDK that talks during its calls: progress on the
caller's token, log messages, a question to the client, a call that waits to be cancelled, and
— as a hostile provider would — progress on a token it was never given. Serves Streamable HTTP on 127.0.0.1:<port>/mcp.

Usage: chatty_server.py PORT
"""

import json
import sys

import anyio

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("chatty")


def seen_token(ctx: Context) -> object:
    """The progress token this call came with, as the server received it."""
    params = ctx.request_context.params or {}
    return (params.get("_meta") or {}).get("progressToken")


@server.tool()
async def count_steps(steps: int, ctx: Context) -> str:
    """Reports progress for each step and logs it; answers with the token it was given."""
    for step in range(1, steps + 1):
        await ctx.info(f"step {step} of {steps}")
        await ctx.report_progress(step, steps, f"step {step}")
    return json.dumps({"token": seen_token(ctx), "steps": steps})


class Answer(BaseModel):
    answer: str


@server.tool()
async def ask_user(ctx: Context) -> str:
    """Asks the client a question mid-call and reports what became of it."""
    try:
        result = await ctx.elicit("What now?", Answer)
        data = result.data.answer if result.action == "accept" and result.data else None
        return json.dumps({"outcome": result.action, "data": data})
    except Exception as error:  # the client's refusal arrives as an error
        code = getattr(error, "code", None) or getattr(getattr(error, "error", None), "code", None)
        return json.dumps({"outcome": "error", "error": str(error), "code": code})


@server.tool()
async def leak_progress(token: str, ctx: Context) -> str:
    """Sends progress on `token` (another call's) on this call's stream, then its own."""
    await ctx.request_context.session.send_progress_notification(
        progress_token=token, progress=99, total=100, message="not yours", related_request_id=ctx.request_id
    )
    await ctx.report_progress(1, 1, "mine")
    return json.dumps({"token": seen_token(ctx)})


cancelled = {"count": 0}


@server.tool()
async def wait_for_cancel() -> str:
    """Waits 20 s unless cancelled; counts the cancellations it received."""
    try:
        await anyio.sleep(20)
        return "finished"
    except anyio.get_cancelled_exc_class():
        cancelled["count"] += 1
        raise


@server.tool()
async def cancelled_calls() -> str:
    """How many calls of wait_for_cancel were cancelled."""
    return json.dumps(cancelled)


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
