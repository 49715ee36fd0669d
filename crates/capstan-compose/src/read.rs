//! Reading a project's documents for a composition: one trait over the cached crd source and
//! the uncached fixture and http sources, each read told apart by how it was answered — an
//! outage is never counted as "this project has no capabilities".

use std::sync::Arc;

use futures::future::BoxFuture;
use tracing::warn;

use crate::document::Snapshot;
use crate::source::DocumentSource;

/// How a read was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadOutcome {
    /// A fresh cached answer.
    Hit,
    /// Read from the source (and cached, where there is a cache).
    Miss,
    /// The source failed; the last good answer was served.
    StaleServed,
    /// The source failed and there was nothing to serve: no documents.
    Error,
    /// The source answered with no documents (never cached).
    Empty,
}

impl ReadOutcome {
    /// Every outcome, in label order.
    pub const ALL: [ReadOutcome; 5] = [
        Self::Hit,
        Self::Miss,
        Self::StaleServed,
        Self::Error,
        Self::Empty,
    ];

    /// The metric label (`hit`, `miss`, `stale_served`, `error`, `empty`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::StaleServed => "stale_served",
            Self::Error => "error",
            Self::Empty => "empty",
        }
    }
}

/// A project's documents and qualifiers and how they were obtained. Never an error: a source
/// that cannot answer composes nothing (logged), and the outcome says so.
pub trait ProjectDocuments: Send + Sync {
    /// The snapshot of `project`.
    fn read<'a>(&'a self, project: &'a str) -> BoxFuture<'a, (Arc<Snapshot>, ReadOutcome)>;

    /// For a source that learns of changes as they happen (a watch), a receiver whose value
    /// moves whenever any project's documents or qualifiers may have changed; `None` for a
    /// source that only answers when read (live sessions re-read it on a timer instead).
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// A source read afresh on every composition (fixture and http: the contract caches only the
/// crd source).
pub struct Uncached(Arc<dyn DocumentSource>);

impl Uncached {
    /// Reads `source` on every call.
    pub fn new(source: Arc<dyn DocumentSource>) -> Self {
        Self(source)
    }
}

impl ProjectDocuments for Uncached {
    fn read<'a>(&'a self, project: &'a str) -> BoxFuture<'a, (Arc<Snapshot>, ReadOutcome)> {
        Box::pin(async move {
            match self.0.documents(project).await {
                Ok(snapshot) if snapshot.is_empty() => (Arc::new(snapshot), ReadOutcome::Empty),
                Ok(snapshot) => (Arc::new(snapshot), ReadOutcome::Miss),
                Err(error) => {
                    warn!(%error, "capability documents unavailable; composing built-ins only");
                    (Arc::new(Snapshot::default()), ReadOutcome::Error)
                }
            }
        })
    }
}
