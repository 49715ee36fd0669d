"""Lists, gets, reads and completes what a server offers besides tools — with the Python `mcp`
SDK's client, independent of Capstan — and prints one JSON report: every answer as the SDK
parsed it, or the error the server gave (code, message, data).

Usage: offerings.py TARGET PROJECT MODE OPS
TARGET: a socket path (the sidecar) or a URL (a server directly); MODE: `legacy` (a session
revision) or `2026-07-28`; OPS: a JSON list of operations, each one of
  {"op": "prompts"} | {"op": "resources"} | {"op": "templates"} | {"op": "tools"}
  {"op": "get", "name": N, "arguments": {...}} | {"op": "read", "uri": U}
  {"op": "complete", "prompt": N, "argument": A, "value": V}
  {"op": "call", "name": N, "arguments": {...}, "until": {"contains"|"lacks": S}, "seconds": T}
  (with `until`, called again until its text contains or lacks S)
  {"op": "parallel", "calls": [CALL...]} (the call ops at once on one session; their results
  in order, under "results")
  {"op": "subscribe", "uri": U} | {"op": "unsubscribe", "uri": U}
  {"op": "until", "count": C, "seconds": S} (until C notifications came, for at most S seconds)
  {"op": "until", "uri": U, "seconds": S} (until an update of U came, for at most S seconds)
  {"op": "until", "method": M, "seconds": S} (until a notification M came, for at most S seconds)
  {"op": "slow", "seconds": S} (from now on, the client takes S seconds over each notification)
  {"op": "write", "path": P, "json": J} (replaces file P with J, atomically: a sidecar's fixture;
  with "text": T instead of "json", with the text T)
  {"op": "run", "argv": [A...], "input": I} (runs the command A with I on its standard input,
  to its end: what changes the world between two calls, e.g. kubectl rotating a Secret; its
  exit status and standard error)
  {"op": "listen", "ready": CALL, "call": N, "arguments": {...}, "subscriptions": [U...],
   "events": K, "seconds": S, "then": CALL} (2026-07-28: a listen stream for prompt and
  resource list changes and updates of the URIs U; once the call op `ready` (optional) has
  returned, calls tool N; the first K events within S seconds, by their type's name (the
  first as "event"), the URIs the server honored, and the result of the call op CALL made
  while the stream is still open)
An op with `"client": NAME` runs in a second session of its own, opened at its first op with
the token `token-of-NAME` (or that op's `"token": T`) and kept to the end. The report's last entry holds the notifications
each client received: {"notifications": [{"method": M, "uri": U}, ...], "peers": {NAME: [...]}}.
"""

import asyncio
import json
import os
import sys
import warnings
from contextlib import AsyncExitStack

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
        return await call(client, op)
    if kind == "parallel":
        results = await asyncio.gather(*(call(client, c) for c in op["calls"]))
        return {"results": list(results)}
    if kind == "subscribe":
        await client.subscribe_resource(op["uri"])
        return {}
    if kind == "unsubscribe":
        await client.unsubscribe_resource(op["uri"])
        return {}
    if kind == "listen":
        listen = client.listen(
            prompts_list_changed=True,
            resources_list_changed=True,
            resource_subscriptions=op.get("subscriptions", ()),
        )
        async with listen as sub:
            if "ready" in op:
                await call(client, op["ready"])
            await client.call_tool(op["call"], op.get("arguments", {}))
            events: list = []
            with anyio.move_on_after(op["seconds"]):
                async for event in sub:
                    uri = getattr(event, "uri", None)
                    events.append({"type": type(event).__name__, **({"uri": uri} if uri else {})})
                    if len(events) >= op.get("events", 1):
                        break
            honored = sub.honored.resource_subscriptions if sub.honored else None
            report = {
                "event": events[0]["type"] if events else None,
                "events": events,
                "honored": list(honored or []),
            }
            if "then" in op:
                report["then"] = await call(client, op["then"])
            return report
    if kind == "write":
        with open(op["path"] + ".new", "w") as file:
            if "text" in op:
                file.write(op["text"])
            else:
                json.dump(op["json"], file)
        os.replace(op["path"] + ".new", op["path"])
        return {}
    if kind == "run":
        process = await anyio.run_process(
            op["argv"], input=op.get("input", "").encode(), check=False
        )
        return {"status": process.returncode, "stderr": process.stderr.decode()}
    if kind == "until":
        def done() -> bool:
            if "uri" in op:
                return any(n.get("uri") == op["uri"] for n in notifications)
            if "method" in op:
                return any(n["method"] == op["method"] for n in notifications)
            return len(notifications) >= op["count"]

        with anyio.move_on_after(op["seconds"]):
            while not done():
                await asyncio.sleep(0.05)
        return {"received": len(notifications)}
    raise ValueError(f"unknown op {kind}")


async def call(client: Client, op: dict) -> dict:
    """Calls tool `name`; with `until` ({"contains": S} or {"lacks": S}), again every 0.1 s
    until its first text does, for at most `seconds`."""
    until = op.get("until")
    with anyio.move_on_after(op.get("seconds", 10)):
        while True:
            result = dump(await client.call_tool(op["name"], op.get("arguments", {})))
            text = (result.get("content") or [{}])[0].get("text", "")
            if until is None or ("contains" in until) == (until.get("contains", until.get("lacks")) in text):
                return result
            await asyncio.sleep(0.1)
    return result


async def main(target: str, project: str, mode: str, ops: str) -> None:
    warnings.simplefilter("ignore")
    report: list = []
    notifications: dict[str, list] = {}
    clients: dict[str, Client] = {}
    delays: dict[str, float] = {}

    async with AsyncExitStack() as stack:

        async def client_named(name: str, token: str | None = None) -> Client:
            if name in clients:
                return clients[name]
            received: list = notifications.setdefault(name, [])

            async def on_message(message) -> None:
                method = getattr(message, "method", None)
                if isinstance(method, str) and method.startswith("notifications/"):
                    await asyncio.sleep(delays.get(name, 0))
                    params = getattr(message, "params", None)
                    uri = getattr(params, "uri", None)
                    received.append({"method": method, **({"uri": str(uri)} if uri else {})})

            if token is None:
                token = "" if name == "main" else f"token-of-{name}"
            http, url = http_target(target, project, token)
            await stack.enter_async_context(http)
            transport = streamable_http_client(url, http_client=http)
            options = {"mode": "legacy"} if mode == "legacy" else {}
            options["message_handler"] = on_message
            clients[name] = await stack.enter_async_context(Client(transport, **options))
            return clients[name]

        for op in json.loads(ops):
            name = op.get("client", "main")
            client = await client_named(name, op.get("token"))
            if op["op"] == "slow":
                delays[name] = op["seconds"]
                report.append({"ok": {}})
                continue
            try:
                report.append({"ok": await run(client, op, notifications[name])})
            except MCPError as error:
                report.append({"error": error.error.model_dump(exclude_none=True, mode="json")})
    peers = {name: received for name, received in notifications.items() if name != "main"}
    report.append({"notifications": notifications.get("main", []), "peers": peers})
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
