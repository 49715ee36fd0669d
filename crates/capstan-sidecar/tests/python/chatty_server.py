"""An MCP server written with the Python `mcp` SDK that talks during its calls: progress on the
caller's token, log messages, a question to the client, a call that waits to be cancelled, and
— as a hostile provider would — progress on a token it was never given. Serves Streamable HTTP on 127.0.0.1:<port>/mcp.

Usage: chatty_server.py PORT [stateless] [--tls CERT KEY]
With `stateless` the server assigns no session (the SDK's stateless HTTP mode): each request is
served on its own, and what the server says about a call goes on that call's response stream.
With `--tls CERT KEY` it serves HTTPS with that certificate and key.
"""

import json
import sys
from typing import Annotated

import anyio

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types import InputRequiredResult

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


def ask_to_proceed() -> Elicit[Answer]:
    return Elicit("Proceed?", Answer)


confirm_rounds = {"count": 0, "retries": 0}


@server.tool()
async def confirm(answer: Annotated[Answer, Resolve(ask_to_proceed)], ctx: Context) -> str:
    """Asks the client whether to proceed — mid-call in a session revision, as an
    `input_required` result answered by a retry in 2026-07-28 — and says what it was told."""
    return json.dumps({"answer": answer.answer})


@server.tool()
async def create_issue(title: str, answer: Annotated[Answer, Resolve(ask_to_proceed)]) -> str:
    """Creates an issue once the client says to proceed (a provider of `cap.issue.create`)."""
    return json.dumps({"title": title, "answer": answer.answer})


@server.tool()
async def confirm_calls() -> str:
    """How many `confirm` and `create_issue` requests arrived, and how many were retries."""
    return json.dumps(confirm_rounds)


async def count_confirm_rounds(ctx, params):
    if params.name in ("confirm", "create_issue"):
        confirm_rounds["count"] += 1
        if params.input_responses:
            confirm_rounds["retries"] += 1
    return await calls.handler(ctx, params)


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


@server.prompt()
def approve(ctx: Context):
    """Asks the client to approve first (2026-07-28: an `input_required` result, its answer read
    on the retry with the server's own request state)."""
    responses = ctx.input_responses
    if not responses:
        return InputRequiredResult.model_validate({
            "resultType": "input_required",
            "inputRequests": {"ok": {"method": "elicitation/create", "params": {
                "mode": "form", "message": "Approve?",
                "requestedSchema": {"type": "object", "properties": {"answer": {"type": "string"}},
                                    "required": ["answer"]}}}},
            "requestState": "approve-1",
        })
    answered = responses["ok"]
    content = answered.get("content") if isinstance(answered, dict) else answered.content
    return f"approved: {content['answer']} (state {ctx.request_state})"


calls = server._lowlevel_server.get_request_handler("tools/call")
server._lowlevel_server.add_request_handler("tools/call", calls.params_type, count_confirm_rounds)

if __name__ == "__main__":
    port, options = int(sys.argv[1]), sys.argv[2:]
    stateless = "stateless" in options
    if "--tls" in options:
        # HTTPS with the test's certificate and key: a provider behind TLS.
        import uvicorn

        at = options.index("--tls")
        app = server.streamable_http_app(stateless_http=stateless, host="127.0.0.1")
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning",
                    ssl_certfile=options[at + 1], ssl_keyfile=options[at + 2])
    else:
        server.run(transport="streamable-http", host="127.0.0.1", port=port,
                   stateless_http=stateless)
