"""An independent MCP client (the Python `mcp` SDK) that answers whatever a provider asks it —
elicitation (form and URL mode), sampling, roots — and reports exactly what it was asked: the
text a person would read (an elicitation's message and URL, a sampling request's system
prompt), each request's `_meta`, and the logger of every log message it received.

Usage: questions.py URL_OR_SOCKET PROJECT MODE CALLS [DELAY]
MODE: `legacy` (a session revision: questions arrive mid-call) or `2026-07-28` (they arrive as
`input_required` results the SDK answers by calling again). CALLS: a JSON list of
{"name": N, "arguments": {...}}. DELAY: seconds the client takes over each question before
answering (a person reading it). Prints one JSON object: {"results": [...], "asked": [...],
"logs": [...]}.
"""

import asyncio
import json
import sys
import warnings

from http_target import http_target
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

asked: list = []
logs: list = []
delay = {"seconds": 0.0}


def meta_of(params) -> dict:
    meta = getattr(params, "meta", None)
    if meta is None:
        return {}
    return meta if isinstance(meta, dict) else meta.model_dump(by_alias=True, exclude_none=True)


async def on_elicit(context, params):
    asked.append({
        "method": "elicitation/create",
        "mode": getattr(params, "mode", None) or "form",
        "message": params.message,
        "url": getattr(params, "url", None),
        "meta": meta_of(params),
    })
    await asyncio.sleep(delay["seconds"])
    if getattr(params, "mode", None) == "url":
        return types.ElicitResult(action="accept")
    return types.ElicitResult(action="accept", content={"token": "t0k3n", "answer": "t0k3n"})


async def on_sample(context, params):
    asked.append({"method": "sampling/createMessage", "systemPrompt": params.system_prompt,
                  "meta": meta_of(params)})
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="sampled"), model="test")


async def on_roots(context):
    asked.append({"method": "roots/list"})
    return types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])


async def on_log(params) -> None:
    logs.append({"logger": params.logger, "data": params.data, "meta": meta_of(params)})


async def main(target: str, project: str, mode: str, calls: str, seconds: str = "0") -> None:
    warnings.simplefilter("ignore")
    delay["seconds"] = float(seconds)
    http, url = http_target(target, project, "caller-token")
    results: list = []
    async with http:
        options: dict = {"mode": "legacy"} if mode == "legacy" else {}
        options.update(elicitation_callback=on_elicit, sampling_callback=on_sample,
                       list_roots_callback=on_roots, logging_callback=on_log)
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, **options) as client:
            for call in json.loads(calls):
                try:
                    result = await client.call_tool(call["name"], call.get("arguments", {}))
                    results.append(result.model_dump(by_alias=True, exclude_none=True, mode="json"))
                except MCPError as error:
                    results.append({"error": error.error.model_dump(exclude_none=True, mode="json")})
                await asyncio.sleep(0.2)  # log messages sent just before a result
    print(json.dumps({"results": results, "asked": asked, "logs": logs}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
