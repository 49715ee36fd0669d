// An independent MCP client (the official TypeScript SDK, default settings) that lists the
// tools one caller is shown and calls some of them, reporting each call's result or the
// protocol error that refused it — so a test can compare what two callers of one project get.
//
// Usage: node authorized.mjs SOCKET PROJECT TOKEN CALLS_JSON
// CALLS_JSON: [{"name": TOOL, "arguments": {...}}, ...]
// Prints one JSON object: {protocolVersion, tools: [names], calls: [{name, ok} | {name, error}]}

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Agent, fetch } from "undici";

const [socket, project, token, calls] = process.argv.slice(2);
const headers = { "X-Capstan-Project": project, Authorization: `Bearer ${token}` };
const dispatcher = new Agent({ connect: { socketPath: socket } });
const transport = new StreamableHTTPClientTransport(new URL("http://localhost/mcp"), {
  requestInit: { headers },
  fetch: (url, init) => fetch(url, { ...init, dispatcher }),
});
const client = new Client({ name: "capstan-authorization-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const results = [];
for (const call of JSON.parse(calls)) {
  try {
    const result = await client.callTool({ name: call.name, arguments: call.arguments ?? {} });
    results.push({ name: call.name, ok: { isError: Boolean(result.isError) } });
  } catch (error) {
    results.push({ name: call.name, error: { code: error.code ?? null, message: String(error.message) } });
  }
}
console.log(
  JSON.stringify({
    protocolVersion: transport.protocolVersion ?? null,
    tools: tools.tools.map((t) => t.name).sort(),
    calls: results,
  }),
);
await transport.terminateSession();
await client.close();
