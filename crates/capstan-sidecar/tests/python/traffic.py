"""An independent MCP client (the Python `mcp` SDK) that watches a call's own traffic through
the sidecar: sets the log level, calls tools with a progress callback and a logging callback,
and reports every progress and log message it received, per call.

Usage: traffic.py URL_OR_SOCKET PROJECT TOKEN [ANSWERS]
URL_OR_SOCKET is a Unix socket path (the sidecar) or an http:// URL (the server directly). With
ANSWERS (any value) the client declares elicitation and answers every question "go".
Prints one JSON object.
"""

import asyncio
import json
import sys
import warnings

from http_target import http_target
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client


async def answer_go(context, params) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"answer": f"go: {params.message}"})


async def main(target: str, project: str, token: str, answers: str = "") -> None:
    # logging is deprecated as of 2026-07-28; these are session-revision calls.
    warnings.simplefilter("ignore")
    http, url = http_target(target, project, token)
    logs: list = []

    async def on_log(params) -> None:
        logs.append(params.data)

    report: dict = {}
    async with http:
        transport = streamable_http_client(url, http_client=http)
        elicitation = answer_go if answers else None
        async with Client(
            transport, mode="legacy", logging_callback=on_log, elicitation_callback=elicitation
        ) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            prefix = "" if "count_steps" in tools else "chatty__"
            try:
                await client.set_logging_level("debug")
                report["setLevel"] = "ok"
            except Exception as error:  # a server without logging refuses it
                report["setLevel"] = str(error)

            async def call(name: str, arguments: dict, progress_expected: int = 0, logs_expected: int = 0) -> dict:
                progress: list = []

                async def on_progress(value: float, total: float | None, message: str | None) -> None:
                    progress.append({"progress": value, "total": total, "message": message})

                logs.clear()
                result = await client.call_tool(prefix + name, arguments, progress_callback=on_progress)
                # Notifications sent just before the result may be handled after it: wait for
                # those expected (at most 10 s, however loaded the machine), then a little for
                # any that should not come.
                for _ in range(200):
                    if len(progress) >= progress_expected and len(logs) >= logs_expected:
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.2)
                texts = [c.text for c in result.content if getattr(c, "text", None)]
                return {
                    "answer": json.loads(texts[0]) if texts and texts[0].startswith("{") else texts,
                    "isError": bool(result.is_error),
                    "progress": progress,
                    "logs": list(logs),
                }

            report["count"] = await call("count_steps", {"steps": 3}, progress_expected=3, logs_expected=3)
            report["ask"] = await call("ask_user", {})
            answer = report["count"]["answer"]
            seen = answer.get("token") if isinstance(answer, dict) else ""
            report["leak"] = await call("leak_progress", {"token": str(seen)}, progress_expected=1)

            async def cancelled_count() -> int:
                result = await client.call_tool(prefix + "cancelled_calls", {})
                return json.loads(result.content[0].text)["count"]

            # A call the client gives up (its read timeout sends notifications/cancelled).
            before = await cancelled_count()
            outcome = "answered"
            try:
                await client.call_tool(prefix + "wait_for_cancel", {}, read_timeout_seconds=1)
            except Exception as error:
                outcome = type(error).__name__
            after = before
            for _ in range(50):
                after = await cancelled_count()
                if after > before:
                    break
                await asyncio.sleep(0.2)
            report["cancel"] = {"outcome": outcome, "before": before, "after": after}
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
