//! capstan-compose: turns a project's capability documents into one composed tool set —
//! sources and their cache, the endpoint guard, knowledge, skills and MCP upstreams — with a
//! per-binding outcome the sidecar serves and the controller's probe reports.

pub mod cache;
pub mod compose;
pub mod fetch;
pub mod guard;
pub mod knowledge;
pub mod pooled;
pub mod source;
pub mod upstream;

pub use cache::{CachedSource, Outcome};
pub use compose::{
    BindingOutcome, Composed, ComposedTool, Composer, Composition, Document, Limits, SkillSummary,
};
pub use fetch::Fetcher;
pub use guard::{EndpointGuard, Refusal};
pub use source::{CrdSource, DocumentSource, FixtureSource, HttpSource, SourceError};

/// Installs the process-wide TLS crypto provider (ring, the one kube uses) unless one is
/// installed already. Call once before building clients.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
