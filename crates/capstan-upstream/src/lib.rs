//! capstan-upstream: everything Capstan says to a provider over HTTP. Every URL a capability
//! document names passes the endpoint guard ([`guard`]); knowledge sources and skill bodies are
//! fetched, capped, through [`fetch`]; each `mcpServers[]` entry is one MCP client session
//! ([`mcp`]); and every request carries the trace context of the span it is sent in
//! ([`trace_context`]). Nothing outside this crate opens a connection to a provider.
//!
//! How the modules depend on each other: `docs/architecture.md#capstan-upstream`.

pub mod credential;
pub mod exchange;
pub mod fetch;
pub mod guard;
pub mod mcp;
pub mod trace_context;
