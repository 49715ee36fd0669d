// An independent MCP client (the official TypeScript SDK 2.x, `@modelcontextprotocol/client`,
// version negotiation in auto mode) talking to the sidecar over its Unix socket: probe
// `server/discover`, list tools, read the instructions, call one tool.
//
// Usage: node client_sdk2.mjs SOCKET PROJECT TOKEN TOOL ARGUMENTS_JSON
// Prints one JSON object: tools, instructions, protocol version, the call's result.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { Agent, fetch } from "undici";

const [socket, project, token, tool, args] = process.argv.slice(2);
const headers = { "X-Capstan-Project": project };
if (token) headers.Authorization = `Bearer ${token}`;

// Every request goes over the Unix socket; the URL's host is what the sidecar checks.
const dispatcher = new Agent({ connect: { socketPath: socket } });
const transport = new StreamableHTTPClientTransport(new URL("http://localhost/mcp"), {
  requestInit: { headers },
  fetch: (url, init) => fetch(url, { ...init, dispatcher }),
});
const client = new Client(
  { name: "capstan-test", version: "2.0.0" },
  { versionNegotiation: { mode: "auto" } },
);
await client.connect(transport);
const tools = await client.listTools();
const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
console.log(
  JSON.stringify({
    protocolVersion: transport.protocolVersion ?? null,
    tools: tools.tools.map((t) => t.name),
    instructions: client.getInstructions() ?? null,
    isError: Boolean(result.isError),
    structured: result.structuredContent ?? null,
  }),
);
await client.close();
