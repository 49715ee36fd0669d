"""An independent MCP client (the Python `mcp` SDK) of the 2026-07-28 revision that asks for log
messages at LEVEL on every request (`io.modelcontextprotocol/logLevel` in `_meta`), calls the
chatty server's `count_steps` (which logs each step at `info`) and prints the messages it got.

Usage: levels.py URL_OR_SOCKET PROJECT LEVEL
Prints one JSON object: {"logs": [...]}.
"""

import asyncio
import json
import sys
import warnings

from http_target import http_target
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(target: str, project: str, level: str) -> None:
    warnings.simplefilter("ignore")
    http, url = http_target(target, project, "caller-token")
    tool = "count_steps" if target.startswith("http") else "chatty__count_steps"
    logs: list = []

    async def on_log(params) -> None:
        logs.append(params.data)

    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, log_level=level, logging_callback=on_log) as client:
            await client.call_tool(tool, {"steps": 3})
    print(json.dumps({"logs": logs}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
