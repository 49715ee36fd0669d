"""Lists, gets, reads and completes what a server offers besides tools — with the Python `mcp`
SDK's client, independent of Capstan — and prints one JSON report: every answer as the SDK
parsed it, or the error the server gave (code, message, data).

Usage: offerings.py TARGET PROJECT MODE OPS
TARGET: a socket path (the sidecar) or a URL (a server directly); MODE: `legacy` (a session
revision) or `2026-07-28`; OPS: a JSON list of operations, each one of
  {"op": "prompts"} | {"op": "resources"} | {"op": "templates"} | {"op": "tools"}
  {"op": "get", "name": N, "arguments": {...}} | {"op": "read", "uri": U}
  {"op": "complete", "prompt": N, "argument": A, "value": V}
  {"op": "call", "name": N, "arguments": {...}}
  {"op": "subscribe", "uri": U} | {"op": "unsubscribe", "uri": U}
  {"op": "until", "count": C, "seconds": S} (until C notifications came, for at most S seconds)
  {"op": "listen", "call": N, "seconds": S} (2026-07-28: a listen stream for prompt and resource
  list changes; calls tool N; the first event within S seconds, by its type's name)
The report's last entry holds the notifications the client received:
{"notifications": [{"method": M, "uri": U}, ...]}.
"""

import asyncio
import json
import sys
import warnings

import anyio
from http_target import http_target
from mcp import Client, types
from mcp.shared.exceptions import MCPError
from mcp.client.streamable_http import streamable_http_client


def dump(result) -> dict:
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


async def run(client: Client, op: dict, notifications: list) -> dict:
    kind = op["op"]
    if kind == "prompts":
        return dump(await client.list_prompts())
    if kind == "resources":
        return dump(await client.list_resources())
    if kind == "templates":
        return dump(await client.list_resource_templates())
    if kind == "tools":
        return dump(await client.list_tools())
    if kind == "get":
        return dump(await client.get_prompt(op["name"], op.get("arguments")))
    if kind == "read":
        return dump(await client.read_resource(op["uri"], cache_mode="bypass"))
    if kind == "complete":
        reference = types.PromptReference(type="ref/prompt", name=op["prompt"])
        return dump(await client.complete(reference, {"name": op["argument"], "value": op["value"]}))
    if kind == "call":
        return dump(await client.call_tool(op["name"], op.get("arguments", {})))
    if kind == "subscribe":
        await client.subscribe_resource(op["uri"])
        return {}
    if kind == "unsubscribe":
        await client.unsubscribe_resource(op["uri"])
        return {}
    if kind == "listen":
        async with client.listen(prompts_list_changed=True, resources_list_changed=True) as sub:
            await client.call_tool(op["call"], {})
            event = None
            with anyio.move_on_after(op["seconds"]):
                async for event in sub:
                    break
            return {"event": type(event).__name__ if event is not None else None}
    if kind == "until":
        with anyio.move_on_after(op["seconds"]):
            while len(notifications) < op["count"]:
                await asyncio.sleep(0.05)
        return {"received": len(notifications)}
    raise ValueError(f"unknown op {kind}")


async def main(target: str, project: str, mode: str, ops: str) -> None:
    warnings.simplefilter("ignore")
    http, url = http_target(target, project)
    report: list = []
    notifications: list = []

    async def on_message(message) -> None:
        method = getattr(message, "method", None)
        if isinstance(method, str) and method.startswith("notifications/"):
            params = getattr(message, "params", None)
            uri = getattr(params, "uri", None)
            notifications.append({"method": method, **({"uri": str(uri)} if uri else {})})

    async with http:
        transport = streamable_http_client(url, http_client=http)
        options = {"mode": "legacy"} if mode == "legacy" else {}
        options["message_handler"] = on_message
        async with Client(transport, **options) as client:
            for op in json.loads(ops):
                try:
                    report.append({"ok": await run(client, op, notifications)})
                except MCPError as error:
                    report.append({"error": error.error.model_dump(exclude_none=True, mode="json")})
    report.append({"notifications": notifications})
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
