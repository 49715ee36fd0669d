//! capstan-compose: turns a project's capability documents into one composed tool set —
//! sources and their cache, the endpoint guard, knowledge, skills and MCP upstreams — with a
//! per-binding outcome the sidecar serves and the controller's probe reports. The platform
//! tools a task adds beside it live in `capstan-platform`.
//!
//! How the modules depend on each other: `docs/architecture.md#capstan-compose`.

// Each concept is a public module, named where its names live (`capstan_compose::source::
// CrdSource`); the MCP client, the endpoint guard and the fetcher are capstan-upstream's.

/// The capabilities a project's qualifiers route, and the `cap.*` tool of each.
pub mod capabilities;
/// Making compositions: the composer, a live composition and what its calls can fail with.
pub mod composer;
/// A composition's data: its tools, prompts, resources, skills and per-binding outcomes.
pub mod composition;
/// Who Capstan is to a provider: the credential of each endpoint with an `auth` block.
pub mod credentials;
/// One shared copy of what many tasks hold alike.
pub mod interned;
mod knowledge;
/// The limits and timeouts a composer works within.
pub mod limits;
/// How a provider's tool is named to the assistant.
pub mod names;
/// Pinned tool definitions and offerings, and their digests.
pub mod pins;
/// Where capability documents come from: the sources, their cache and the snapshot read.
pub mod source;
