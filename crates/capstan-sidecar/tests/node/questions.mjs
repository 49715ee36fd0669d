// An independent MCP client (the official TypeScript SDK 2.x) that answers whatever a provider
// asks it — elicitation (form and URL mode) and sampling — and reports what it was asked: the
// text a person would read (an elicitation's message and URL, a sampling request's system
// prompt) and each request's `_meta`.
//
// Usage: node questions.mjs SOCKET PROJECT MODE CALLS (MODE: `legacy` keeps a session revision,
// questions arrive mid-call; `auto` negotiates 2026-07-28, they arrive as input_required
// results the SDK answers by calling again; CALLS: a JSON list of {name, arguments})
// Prints one JSON object: {results, asked}.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { Agent, fetch } from "undici";

const [socket, project, mode, calls] = process.argv.slice(2);
const dispatcher = new Agent({ connect: { socketPath: socket } });
const transport = new StreamableHTTPClientTransport(new URL("http://localhost/mcp"), {
  requestInit: { headers: { "X-Capstan-Project": project, Authorization: "Bearer caller-token" } },
  fetch: (url, init) => fetch(url, { ...init, dispatcher }),
});
const client = new Client(
  { name: "capstan-questions-test", version: "2.0.0" },
  {
    capabilities: { elicitation: { form: {}, url: {} }, sampling: {} },
    ...(mode === "auto" ? { versionNegotiation: { mode: "auto" } } : {}),
  },
);
const asked = [];
client.setRequestHandler("elicitation/create", async (request) => {
  const params = request.params;
  asked.push({ method: "elicitation/create", mode: params.mode ?? "form", message: params.message,
               url: params.url ?? null, meta: params._meta ?? {} });
  return params.mode === "url" ? { action: "accept" } : { action: "accept", content: { token: "t0k3n" } };
});
client.setRequestHandler("sampling/createMessage", async (request) => {
  const params = request.params;
  asked.push({ method: "sampling/createMessage", systemPrompt: params.systemPrompt ?? null,
               meta: params._meta ?? {} });
  return { role: "assistant", content: { type: "text", text: "sampled" }, model: "test" };
});
await client.connect(transport);
const results = [];
for (const call of JSON.parse(calls)) {
  try {
    results.push(await client.callTool({ name: call.name, arguments: call.arguments ?? {} }));
  } catch (error) {
    results.push({ error: { message: error.message, code: error.code ?? null } });
  }
}
console.log(JSON.stringify({ protocolVersion: transport.protocolVersion ?? null, results, asked }));
await client.close();
