"""An independent MCP client (the Python `mcp` SDK) that calls the chatty server's `count_steps`
once, with a progress callback and a logging callback, and reports what it received.

Usage: progress.py URL_OR_SOCKET PROJECT TOKEN
URL_OR_SOCKET is a Unix socket path (the sidecar) or an http:// URL (the server directly).
Prints one JSON object: {"progress": [...], "logs": [...], "answer": ...}.
"""

import asyncio
import json
import sys
import warnings

from http_target import http_target
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(target: str, project: str, token: str) -> None:
    # logging is deprecated as of 2026-07-28; this is a session-revision client.
    warnings.simplefilter("ignore")
    http, url = http_target(target, project, token)
    progress: list = []
    logs: list = []

    async def on_log(params) -> None:
        logs.append(params.data)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})

    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", logging_callback=on_log) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            name = "count_steps" if "count_steps" in tools else "chatty__count_steps"
            result = await client.call_tool(name, {"steps": 3}, progress_callback=on_progress)
            # Notifications sent just before the result may be handled after it: wait for the
            # three expected (at most 10 s, however loaded the machine).
            for _ in range(200):
                if len(progress) >= 3 and len(logs) >= 3:
                    break
                await asyncio.sleep(0.05)
            texts = [c.text for c in result.content if getattr(c, "text", None)]
            answer = json.loads(texts[0]) if texts and texts[0].startswith("{") else texts
    print(json.dumps({"progress": progress, "logs": logs, "answer": answer,
                      "isError": bool(result.is_error)}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
