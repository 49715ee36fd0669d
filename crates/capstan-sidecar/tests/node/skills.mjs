// An independent client of the MCP skills extension (SEP-2640): the official TypeScript SDK
// 2.x's SkillsClient, which checks every file it reads against the listed entry (size,
// digest, frontmatter). Lists the sidecar's skills, gets and reads each, and asks for one
// that does not exist.
//
// Usage: node skills.mjs SOCKET PROJECT MODE (MODE: `auto` negotiates 2026-07-28; `legacy`
// keeps a session revision)
// Prints one JSON object: supported, the entries, what each read returned (or its error),
// and the error of an unknown skill.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { SkillsClient } from "@modelcontextprotocol/client/ext/skills";
import { Agent, fetch } from "undici";

const [socket, project, mode] = process.argv.slice(2);
const dispatcher = new Agent({ connect: { socketPath: socket } });
const transport = new StreamableHTTPClientTransport(new URL("http://localhost/mcp"), {
  requestInit: { headers: { "X-Capstan-Project": project } },
  fetch: (url, init) => fetch(url, { ...init, dispatcher }),
});
const client = new Client(
  { name: "capstan-skills-test", version: "2.0.0" },
  mode === "auto" ? { versionNegotiation: { mode: "auto" } } : {},
);
await client.connect(transport);
const skills = new SkillsClient(client);
if (!skills.supported) {
  // The sidecar did not declare the extension: nothing to list.
  console.log(JSON.stringify({ protocolVersion: transport.protocolVersion ?? null, supported: false }));
  await client.close();
  process.exit(0);
}
const failure = (error) => ({ error: error.message, code: error.code ?? null, reason: error.reason ?? null });
const listing = await skills.list();
const reads = [];
for (const entry of listing.skills) {
  try {
    const file = await skills.read(entry);
    const got = await skills.get(entry.uri);
    reads.push({ uri: entry.uri, verified: file.verified, frontmatter: file.frontmatter ?? null,
                 body: file.body ?? null, got: got.skill.uri });
  } catch (error) {
    reads.push({ uri: entry.uri, ...failure(error) });
  }
}
let unknown = null;
try {
  await skills.get("capstan://_skills/no-such-skill/SKILL.md");
} catch (error) {
  unknown = failure(error);
}
console.log(JSON.stringify({
  protocolVersion: transport.protocolVersion ?? null,
  supported: skills.supported,
  entries: listing.skills,
  ttlMs: listing.ttlMs ?? null,
  cacheScope: listing.cacheScope ?? null,
  reads,
  unknown,
}));
await client.close();
