"""Puts a provider's resource update into the two windows where a 2026-07-28 listen stream
could lose it, as an independent client (the Python `mcp` SDK) sees them, against the StreamCo
server (crates/capstan-compose/tests/python/streamco_server.py) bound with `touch` and
`slow_listens`, its resources under `PREFIX`.

Usage: listen_windows.py SOCKET PROJECT PREFIX WINDOW

WINDOW `acknowledged`: the server holds every listen stream 3 s before acknowledging it; the
client listens for `orders` and, at once (its stream acknowledged by the sidecar, the sidecar's
stream to the server not yet), has the server say `orders` was updated — heard by no stream
to the server.

WINDOW `reopened`: a first listen for `orders` is followed by the server (its record of its
open streams names it); then the server holds new listen streams 2 s, a second listen of the
same caller names `clicks` (so the sidecar's stream to the server is opened again, naming
both), and once the server holds that new stream the server says `orders` was updated.

Prints one JSON object: the events each listen stream received within 6 s ({"type", "uri"},
and in `acknowledged` whether it came after the server said the update, "after").
"""

import asyncio
import json
import sys
import warnings

import anyio
from http_target import http_target
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def touch(client: Client, uris: list[str]) -> dict:
    result = await client.call_tool("streamco__touch", {"uris": uris})
    return json.loads(result.content[0].text)


async def until(client: Client, check, seconds: float = 10) -> None:
    with anyio.fail_after(seconds):
        while not check(await touch(client, [])):
            await asyncio.sleep(0.05)


async def collect(sub, events: list, seconds: float, wanted: int = 2, said=None) -> None:
    """The first `wanted` events within `seconds`; with `said` (set once the server has said
    the update), whether each came after it: one told before says nothing of the update."""
    with anyio.move_on_after(seconds):
        async for event in sub:
            entry = {"type": type(event).__name__, "uri": str(getattr(event, "uri", ""))}
            if said is not None:
                entry["after"] = said.is_set()
            events.append(entry)
            if len(events) >= wanted:
                break


async def main(socket: str, project: str, prefix: str, window: str) -> None:
    warnings.simplefilter("ignore")
    # A caller of its own per window: each starts with a task of its own.
    http, url = http_target(socket, project, f"token-of-{window}")
    orders, clicks = "streamco://streams/orders", "streamco://streams/clicks"
    report: dict = {}
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        await client.call_tool("streamco__slow_listens", {"seconds": 0})
        if window == "acknowledged":
            # Held 3 s: the update is said (its call answered) well before the acknowledgement.
            await client.call_tool("streamco__slow_listens", {"seconds": 3})
            events: list = []
            said = asyncio.Event()
            async with client.listen(resource_subscriptions=[prefix + orders]) as sub:

                async def say() -> None:
                    await touch(client, [orders])
                    said.set()

                await asyncio.gather(say(), collect(sub, events, 6, wanted=1, said=said))
            report["first"] = events
        else:
            initial: list = []
            first_events: list = []
            second_events: list = []
            async with client.listen(resource_subscriptions=[prefix + orders]) as first:
                await until(client, lambda r: orders in r["listening"])
                # Told once when followed: taken before the window is opened.
                await collect(first, initial, 3, wanted=1)
                await client.call_tool("streamco__slow_listens", {"seconds": 2})
                async with client.listen(resource_subscriptions=[prefix + clicks]) as second:
                    # The sidecar's new stream to the server is held there, not acknowledged.
                    await until(client, lambda r: r["pending"] >= 1)
                    await touch(client, [orders])
                    await asyncio.gather(
                        collect(first, first_events, 6, wanted=1),
                        collect(second, second_events, 6, wanted=1),
                    )
            report["initial"] = initial
            report["first"] = first_events
            report["second"] = second_events
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
