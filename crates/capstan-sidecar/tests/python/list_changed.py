"""An independent MCP client (the Python `mcp` SDK) that stays in one session and waits for
`notifications/tools/list_changed`, as an assistant would while its bindings change.

Usage: list_changed.py SOCKET PROJECT TOKEN MODE [GONE_TOOL]
MODE is the SDK's connect mode (`legacy`, `auto`, or a protocol revision). In a session
revision the notification arrives on the session's stream; at 2026-07-28 (no session) the
client opens a `subscriptions/listen` stream for tool list changes first.

Prints one JSON object per line, flushed, so the test can act between them:
  {"tools": [...], "protocolVersion": ...}   connected and listed; the test changes something now
  {"notifiedAt": <unix seconds>}            the notification arrived (or {"timeout": true})
  {"tools": [...]}                          listed again
  {"gone": {"isError": ..., "error": ...}}  GONE_TOOL called, when given
"""

import asyncio
import json
from contextlib import AsyncExitStack
import sys
import time

import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

# How long to wait for the notification: far above the 2 s the test asserts, so a slow
# machine shows as a measured latency, not as a timeout.
WAIT_SECONDS = 60


def say(value: dict) -> None:
    print(json.dumps(value), flush=True)


async def main(socket: str, project: str, token: str, mode: str, gone: str | None) -> None:
    headers = {"X-Capstan-Project": project}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    changed = asyncio.Event()
    notified: list[float] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            notified.append(time.time())
            changed.set()

    http = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(uds=socket), headers=headers, timeout=90
    )
    async with http:
        transport = streamable_http_client("http://localhost/mcp", http_client=http)
        async with Client(transport, message_handler=on_message, mode=mode) as client:
            version = getattr(client.session, "protocol_version", None)
            async with AsyncExitStack() as stack:
                if version and str(version) >= "2026-07-28":
                    await stack.enter_async_context(client.listen(tools_list_changed=True))
                tools = await client.list_tools()
                say({"tools": [t.name for t in tools.tools], "protocolVersion": str(version) if version else None})
                try:
                    await asyncio.wait_for(changed.wait(), WAIT_SECONDS)
                    say({"notifiedAt": notified[0]})
                except asyncio.TimeoutError:
                    say({"timeout": True})
                tools = await client.list_tools()
                say({"tools": [t.name for t in tools.tools]})
                if gone:
                    try:
                        result = await client.call_tool(gone, {})
                        say({"gone": {"isError": bool(result.is_error), "error": None}})
                    except Exception as error:  # the SDK raises the JSON-RPC error
                        say({"gone": {"isError": True, "error": str(error)}})


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3], args[4] if len(args) > 4 else None))
