#!/usr/bin/env node
// TCP -> Unix-socket HTTP shim for running the MCP conformance suite (which speaks TCP HTTP)
// against capstan-sidecar (which serves MCP Streamable HTTP on a Unix socket).
//
//   node shim.mjs            # env: LISTEN_PORT (3100), LISTEN_HOST (127.0.0.1),
//                            #      CAPSTAN_SOCKET (./capstan.sock), CAPSTAN_PROJECT (conformance),
//                            #      PROJECT_HEADER (X-Capstan-Project), REWRITE_ALL_HOSTS (0)
//
// Per request it: adds `X-Capstan-Project: <project>` (unless the client sent one), and rewrites
// Host to `localhost` when the Host names the shim itself (localhost / 127.0.0.1 / [::1], any
// port). A foreign Host (e.g. the suite's dns-rebinding-protection probe) is passed through
// unchanged so the sidecar's own Host check is what gets tested; REWRITE_ALL_HOSTS=1 rewrites
// every Host instead. Bodies (request and response, incl. SSE) are streamed, not buffered.
import http from 'node:http';
import path from 'node:path';

const port = Number(process.env.LISTEN_PORT || 3100);
const host = process.env.LISTEN_HOST || '127.0.0.1';
const socketPath = path.resolve(process.env.CAPSTAN_SOCKET || './capstan.sock');
const project = process.env.CAPSTAN_PROJECT || 'conformance';
const projectHeader = (process.env.PROJECT_HEADER || 'X-Capstan-Project').toLowerCase();
const rewriteAll = process.env.REWRITE_ALL_HOSTS === '1';
const verbose = process.env.SHIM_VERBOSE === '1';
// DIAGNOSTIC ONLY (off by default): TOOL_PREFIX=everything__ rewrites a tools/call for a bare
// name `X` into `everything__X`, so the tools-call scenarios get past Capstan's `<server>__`
// naming and show what else (progress, logging, sampling, elicitation…) does or does not carry.
const toolPrefix = process.env.TOOL_PREFIX || '';

const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer']);
const SELF = /^(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$/i;

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

const server = http.createServer((req, res) => {
  const headers = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (!HOP.has(k)) headers[k] = v;
  }
  const origHost = req.headers.host || '';
  if (rewriteAll || SELF.test(origHost)) headers.host = 'localhost';
  if (!(projectHeader in headers)) headers[projectHeader] = project;
  if (verbose) console.error(`${req.method} ${req.url} host=${origHost}->${headers.host} mcp-method=${headers['mcp-method'] || ''}`);

  const forward = (body) => {
  if (body !== undefined) headers['content-length'] = String(body.length);
  const up = http.request({ socketPath, agent, method: req.method, path: req.url, headers }, (upRes) => {
    const out = {};
    for (const [k, v] of Object.entries(upRes.headers)) if (!HOP.has(k)) out[k] = v;
    res.writeHead(upRes.statusCode || 502, upRes.statusMessage, out);
    res.flushHeaders();
    upRes.on('data', (chunk) => res.write(chunk));
    upRes.on('end', () => res.end());
    upRes.on('error', () => res.destroy());
  });
  up.on('error', (e) => {
    if (verbose) console.error('upstream error', e.message);
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`shim: ${e.message}\n`);
    } else res.destroy();
  });
  // client went away (e.g. the suite closes an SSE stream): close the upstream request too
  res.on('close', () => { if (!res.writableFinished) up.destroy(); });
  if (body !== undefined) up.end(body); else req.pipe(up);
  };
  if (!toolPrefix || req.method !== 'POST') return forward();
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    let body = Buffer.concat(chunks);
    try {
      const msg = JSON.parse(body.toString('utf8'));
      const one = (m) => {
        if (m && m.method === 'tools/call' && m.params && typeof m.params.name === 'string' && !m.params.name.includes('__')) {
          m.params.name = toolPrefix + m.params.name;
          if (verbose) console.error(`  rewrote tool name -> ${m.params.name}`);
          return true;
        }
        return false;
      };
      const changed = Array.isArray(msg) ? msg.map(one).some(Boolean) : one(msg);
      if (changed) {
        body = Buffer.from(JSON.stringify(msg));
        if (headers['mcp-name']) headers['mcp-name'] = toolPrefix + headers['mcp-name'];
      }
    } catch { /* not JSON: forward as is */ }
    forward(body);
  });
});
server.keepAliveTimeout = 65_000;
server.requestTimeout = 0;
server.listen(port, host, () => console.error(`shim: http://${host}:${port} -> unix:${socketPath} (${projectHeader}: ${project})`));
