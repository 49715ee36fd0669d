// An independent client of the MCP skills extension (SEP-2640): the official TypeScript SDK
// 2.x's SkillsClient, which checks every file it reads against the listed entry (size,
// digest, frontmatter). Lists the sidecar's skills, gets and reads each, and asks for one
// that does not exist.
//
// Usage: node skills.mjs SOCKET PROJECT MODE [NAMES] (MODE: `auto` negotiates 2026-07-28;
// `legacy` keeps a session revision; NAMES, comma-separated: skills to also get by URI and load
// through the `load_skill` tool in the same session, after the reads)
// Prints one JSON object: supported, the entries, what each read returned (or its error) with
// the SHA-256 this script computes of the bytes read, the error of an unknown skill, and for
// each of NAMES what `skills/get` and `load_skill` answered.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { SkillsClient } from "@modelcontextprotocol/client/ext/skills";
import { createHash } from "node:crypto";
import { Agent, fetch } from "undici";

const [socket, project, mode, names] = process.argv.slice(2);
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
  const named = [];
for (const name of names ? names.split(",") : []) {
  let get;
  try {
    get = { uri: (await skills.get(`capstan://_skills/${name}/SKILL.md`)).skill.uri };
  } catch (error) {
    get = failure(error);
  }
  const loaded = await client.callTool({ name: "load_skill", arguments: { name } });
  named.push({ name, get, load: { isError: loaded.isError ?? false, text: loaded.content?.[0]?.text ?? null } });
}
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
    const sha256 = "sha256:" + createHash("sha256").update(file.bytes).digest("hex");
    reads.push({ uri: entry.uri, verified: file.verified, frontmatter: file.frontmatter ?? null,
                 body: file.body ?? null, got: got.skill.uri, sha256 });
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
const named = [];
for (const name of names ? names.split(",") : []) {
  let get;
  try {
    get = { uri: (await skills.get(`capstan://_skills/${name}/SKILL.md`)).skill.uri };
  } catch (error) {
    get = failure(error);
  }
  const loaded = await client.callTool({ name: "load_skill", arguments: { name } });
  named.push({ name, get, load: { isError: loaded.isError ?? false, text: loaded.content?.[0]?.text ?? null } });
}
console.log(JSON.stringify({
  protocolVersion: transport.protocolVersion ?? null,
  supported: skills.supported,
  entries: listing.skills,
  ttlMs: listing.ttlMs ?? null,
  cacheScope: listing.cacheScope ?? null,
  reads,
  unknown,
  named,
}));
await client.close();
