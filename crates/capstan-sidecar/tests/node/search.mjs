// Tool search with the official TypeScript SDK (v2), independent of Capstan: one client on the
// sidecar's socket runs a list of operations and prints one JSON object — the instructions
// the server gave, the revision negotiated, and per operation the names tools/list shows
// (every page) or a call's isError, structuredContent and text.
//
// Usage: node search.mjs SOCKET PROJECT MODE OPS (MODE: `auto` negotiates 2026-07-28; `legacy`
// keeps a session revision; OPS: a JSON list of {"op": "tools"} and
// {"op": "call", "name": N, "arguments": {...}})

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { Agent, fetch } from "undici";

const [socket, project, mode, ops] = process.argv.slice(2);
const dispatcher = new Agent({ connect: { socketPath: socket } });
const transport = new StreamableHTTPClientTransport(new URL("http://localhost/mcp"), {
  requestInit: { headers: { "X-Capstan-Project": project } },
  fetch: (url, init) => fetch(url, { ...init, dispatcher }),
});
const client = new Client(
  { name: "capstan-search-test", version: "2.0.0" },
  mode === "auto" ? { versionNegotiation: { mode: "auto" } } : {},
);
await client.connect(transport);
const results = [];
for (const op of JSON.parse(ops)) {
  if (op.op === "tools") {
    const names = [];
    let cursor;
    do {
      const page = await client.listTools(cursor ? { cursor } : {});
      names.push(...page.tools.map((t) => t.name));
      cursor = page.nextCursor;
    } while (cursor);
    results.push({ tools: names });
  } else if (op.op === "call") {
    try {
      const result = await client.callTool({ name: op.name, arguments: op.arguments ?? {} });
      const text = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
      results.push({ isError: Boolean(result.isError), structuredContent: result.structuredContent ?? null, text });
    } catch (error) {
      results.push({ error: String(error?.message ?? error) });
    }
  } else {
    throw new Error(`unknown op ${op.op}`);
  }
}
console.log(
  JSON.stringify({
    protocolVersion: transport.protocolVersion ?? null,
    instructions: client.getInstructions() ?? null,
    results,
  }),
);
await client.close();
