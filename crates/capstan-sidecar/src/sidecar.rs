//! What every session shares: the document source, the composer, the session bindings,
//! metrics and the metering sink.

use std::sync::Arc;
use std::time::Instant;

use capstan_compose::{CachedSource, Composed, Composer, Document, DocumentSource, Outcome};

use tracing::warn;

use crate::identity::{Identity, Sessions};
use crate::metering::Meter;
use crate::metrics::Metrics;

/// Where documents come from.
pub enum Documents {
    /// Through the per-project cache (the crd source).
    Cached(CachedSource),
    /// Read on every composition (fixture and http: no cache in v1 of the contract).
    Direct(Arc<dyn DocumentSource>),
}

/// The sidecar's shared state.
pub struct Sidecar {
    /// The document source.
    pub documents: Documents,
    /// The composer.
    pub composer: Composer,
    /// Session bindings (identity on every request).
    pub sessions: Arc<Sessions>,
    /// Metrics.
    pub metrics: Metrics,
    /// The metering sink.
    pub meter: Meter,
    /// Zero point of the sessions' idle clocks.
    pub clock: Instant,
}

/// A composition for one identity, with the documents it came from.
pub struct ComposedTask {
    /// The live composition.
    pub composed: Composed,
    /// The documents composed (shared with the cache, not copied per session).
    pub documents: Arc<Vec<Document>>,
}

impl Sidecar {
    /// The project's documents (never an error: an unreachable source composes nothing).
    pub async fn documents(&self, project: &str) -> Arc<Vec<Document>> {
        match &self.documents {
            Documents::Cached(cache) => {
                let (documents, outcome) = cache.documents(project).await;
                self.metrics.source_read(outcome.label());
                documents
            }
            Documents::Direct(source) => {
                // Direct sources have no cache: a read is a miss, empty, or an error — an
                // outage is never counted as "the project has no capabilities".
                let (documents, outcome) = match source.documents(project).await {
                    Ok(documents) if documents.is_empty() => (documents, Outcome::Empty),
                    Ok(documents) => (documents, Outcome::Miss),
                    Err(error) => {
                        warn!(%error, "capability documents unavailable; composing built-ins only");
                        (Vec::new(), Outcome::Error)
                    }
                };
                self.metrics.source_read(outcome.label());
                Arc::new(documents)
            }
        }
    }

    /// Composes the project of `identity`. The caller's token plays no part in composing
    /// provider tools: it is never forwarded to a provider.
    pub async fn compose(&self, identity: &Identity) -> ComposedTask {
        let started = Instant::now();
        let documents = self.documents(&identity.project).await;
        let composed = self.composer.compose(&documents).await;
        self.metrics
            .compose_duration
            .observe(started.elapsed().as_secs_f64());
        let failures = composed
            .composition
            .bindings
            .iter()
            .map(|b| b.upstream_errors.len() + b.refused.len())
            .sum::<usize>();
        self.metrics
            .upstream_connect_failures
            .inc_by(u64::try_from(failures).unwrap_or(u64::MAX));
        ComposedTask {
            composed,
            documents,
        }
    }
}
