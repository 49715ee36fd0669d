"""An independent MCP client (the Python `mcp` SDK, default settings) using the base platform
tools over the sidecar's Unix socket: list ConfigMaps, plan a Widget and the Gadget it refers
to (given in the wrong order), and apply the plan with its token.

Usage: change_path.py SOCKET PROJECT TOKEN
Prints one JSON object: the names listed, the planned order, whether the apply completed.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def structured(result):
    if result.is_error:
        raise SystemExit(f"tool error: {result.structured_content}")
    return result.structured_content


async def main(socket: str, project: str, token: str) -> None:
    headers = {"X-Capstan-Project": project, "Authorization": f"Bearer {token}"}
    http = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(uds=socket), headers=headers, timeout=60
    )
    async with http:
        transport = streamable_http_client("http://localhost/mcp", http_client=http)
        async with Client(transport) as client:
            listed = structured(
                await client.call_tool(
                    "resources_list",
                    {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-a"},
                )
            )
            widget = {
                "apiVersion": "example.capstan.dev/v1",
                "kind": "Widget",
                "metadata": {"name": "py-widget", "namespace": "team-a"},
                "spec": {"size": 4, "gadgetRef": {"name": "py-gadget"}},
            }
            gadget = {
                "apiVersion": "example.capstan.dev/v1",
                "kind": "Gadget",
                "metadata": {"name": "py-gadget", "namespace": "team-a"},
                "spec": {"mode": "auto"},
            }
            plan = structured(
                await client.call_tool("resources_plan", {"manifests": [widget, gadget]})
            )
            applied = structured(
                await client.call_tool(
                    "resources_apply",
                    {"manifests": plan["manifests"], "planToken": plan["planToken"]},
                )
            )
            print(
                json.dumps(
                    {
                        "listed": [item["name"] for item in listed["items"]],
                        "planned": [step["name"] for step in plan["steps"]],
                        "applied": applied.get("complete", False),
                    }
                )
            )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
