"""An independent MCP client (the Python `mcp` SDK) that calls the chatty server's `confirm`
tool, which asks the client whether to proceed: in a session revision as a request mid-call,
in 2026-07-28 as an `input_required` result the client answers by calling again with
`inputResponses` and the server's `requestState`. Then it gets the server's `approve` prompt,
which asks the same way in 2026-07-28, and asks the server how many `confirm` requests reached
it, and how many were such retries.

Usage: input_required.py URL_OR_SOCKET PROJECT MODE [ANSWERS]
MODE: `legacy` or `2026-07-28`. With ANSWERS (any value) the client declares elicitation and
answers "go"; without, it declares none. Prints one JSON object: the call's result (or the
error it got) and the server's counts.
"""

import asyncio
import json
import sys
import warnings

from http_target import http_target
from mcp import Client, types
from mcp.shared.exceptions import MCPError
from mcp.client.streamable_http import streamable_http_client


async def answer_go(context, params) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"answer": f"go: {params.message}"})


async def main(target: str, project: str, mode: str, answers: str = "") -> None:
    warnings.simplefilter("ignore")
    http, url = http_target(target, project, "caller-token")
    tool = "confirm" if target.startswith("http") else "chatty__confirm"
    counts = "confirm_calls" if target.startswith("http") else "chatty__confirm_calls"
    report: dict = {}
    async with http:
        options: dict = {"mode": "legacy"} if mode == "legacy" else {}
        if answers:
            options["elicitation_callback"] = answer_go
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, **options) as client:
            try:
                result = await client.call_tool(tool, {})
                dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
                report["result"] = dumped
            except MCPError as error:
                report["error"] = error.error.model_dump(exclude_none=True, mode="json")
            prompt = "approve" if target.startswith("http") else "chatty__approve"
            try:
                got = await client.get_prompt(prompt)
                report["prompt"] = got.model_dump(by_alias=True, exclude_none=True, mode="json")
            except MCPError as error:
                report["prompt_error"] = error.error.model_dump(exclude_none=True, mode="json")
            seen = await client.call_tool(counts, {})
            report["server"] = json.loads(seen.content[0].text)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
