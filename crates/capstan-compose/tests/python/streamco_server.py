"""An independent StreamCo MCP server written with the Python `mcp` SDK (MCPServer, the
successor of FastMCP), serving Streamable HTTP on 127.0.0.1:<port>/mcp.

Usage: streamco_server.py PORT
"""

import sys

import anyio

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.subscriptions import ListenHandler

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


# resources/subscribe and unsubscribe (the high-level server has no decorator for them): the
# URIs subscribed to, which `touch` reports, and every session that ever subscribed (which
# `touch` with `everyone` tells, subscribed or not: a careless server).
subscribed: set[str] = set()
sessions: dict[str, object] = {}


# The URIs each session subscribed to, by its id.
by_session: dict[str, set[str]] = {}


def session_id(request) -> str:
    return request.headers.get("mcp-session-id", "") if request is not None else ""


async def on_subscribe(ctx, params) -> types.EmptyResult:
    subscribed.add(str(params.uri))
    sessions[session_id(ctx.request)] = ctx.session
    by_session.setdefault(session_id(ctx.request), set()).add(str(params.uri))
    return types.EmptyResult()


async def on_unsubscribe(ctx, params) -> types.EmptyResult:
    subscribed.discard(str(params.uri))
    by_session.get(session_id(ctx.request), set()).discard(str(params.uri))
    return types.EmptyResult()


server._lowlevel_server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, on_subscribe)
server._lowlevel_server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, on_unsubscribe)

# 2026-07-28 clients have no session: they name the resources they want told of on their
# `subscriptions/listen` streams. The URIs each open stream names, by its request id.
listening: dict[str, list[str]] = {}
serve_listen = ListenHandler(server._subscriptions)
# `slow_listens`: how long a listen stream waits before it is acknowledged (and told anything),
# and how many wait now.
listen_delay = [0.0]
pending = [0]


async def on_listen(ctx, params):
    key = str(ctx.request_id)
    if listen_delay[0]:
        pending[0] += 1
        try:
            await anyio.sleep(listen_delay[0])
        finally:
            pending[0] -= 1
    listening[key] = list(params.notifications.resource_subscriptions or [])
    try:
        return await serve_listen(ctx, params)
    finally:
        listening.pop(key, None)


server._lowlevel_server.add_request_handler(
    "subscriptions/listen", types.SubscriptionsListenRequestParams, on_listen
)


@server.tool()
async def touch(
    uris: list[str], ctx: Context, everyone: bool = False, times: list[int] | None = None
) -> dict:
    """Says each of `uris` was updated, in order, `times[i]` times each (once by default), on
    the standalone stream of the session, or with `everyone` of every session that ever
    subscribed — and to the 2026-07-28 listen streams naming it; reports what is subscribed,
    by any session, by the calling one (its id), and by the open listen streams, and how many
    listen streams are open."""
    session = session_id(ctx.request_context.request)
    told = list(sessions.values()) if everyone else [ctx.request_context.session] if session else []
    for i, uri in enumerate(uris):
        for _ in range(times[i] if times else 1):
            for session_told in told:
                await session_told.send_resource_updated(uri)
            await ctx.notify_resource_updated(uri)
    mine = by_session.get(session, set())
    streams = sorted({uri for uris in listening.values() for uri in uris})
    return {
        "subscribed": sorted(subscribed),
        "mine": sorted(mine),
        "session": session,
        "listening": streams,
        "streams": len(listening),
        "pending": pending[0],
    }


@server.tool()
def slow_listens(seconds: float) -> str:
    """Holds every `subscriptions/listen` opened from now on `seconds` before acknowledging it
    (0: at once); `touch` reports how many are held."""
    listen_delay[0] = seconds
    return "ok"


@server.tool()
async def add_prompt(ctx: Context) -> str:
    """Adds the prompt `escalate` and says the prompt list changed."""
    server.add_prompt(Prompt.from_function(escalate, name="escalate"))
    await ctx.request_context.session.send_prompt_list_changed()
    await ctx.notify_prompts_changed()
    return "added"


def escalate(stream: str) -> str:
    """Escalate a stream's incident."""
    return f"Escalate {stream}."


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
