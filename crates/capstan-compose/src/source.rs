//! Sources of a project's capability documents, in two layers.
//!
//! A [`DocumentSource`] is where documents are read from — a fixture file (`source/fixture.rs`),
//! the capability-provider HTTP API (`source/http.rs`), CapabilityBinding objects on the
//! project's control plane (listed per project in `source/crd_list.rs`, watched in
//! `source/crd_watch.rs`). It answers `Err` only when it could not read at all; invalid
//! documents are skipped with a warning and the valid ones kept (`source/objects.rs`, one
//! parse and one validator for every source).
//!
//! [`ProjectDocuments`] is what a composition reads: never an error, each answer told apart by
//! how it was obtained ([`ReadOutcome`]) — an outage is never counted as "this project has no
//! capabilities". The crd sources answer it themselves (the cache in `source/cache.rs`, the
//! watch); the fixture and http sources through [`Uncached`].

pub(crate) mod cache;
pub(crate) mod counted_body;
pub(crate) mod crd_list;
pub(crate) mod crd_watch;
mod fixture;
mod http;
mod objects;
pub(crate) mod snapshot;
pub(crate) mod spec_text;
pub(crate) mod watch_backoff;

use std::sync::Arc;

use futures::future::BoxFuture;
use thiserror::Error;
use tracing::warn;

pub use self::cache::{CachedSource, DEFAULT_CAPACITY, DEFAULT_TTL};
pub use self::crd_list::CrdSource;
pub use self::crd_watch::{WatchCounts, WatchedCluster};
pub use self::fixture::FixtureSource;
pub use self::http::{DEFAULT_PROVIDER_MAX_BODY, HTTP_SOURCE_TIMEOUT, HttpSource};
pub(crate) use self::objects::{documents_of, qualifiers_of};
pub use self::snapshot::{Document, NamedQualifier, Snapshot};
pub use self::watch_backoff::watch_backoff;

/// Why a source could not answer for a project.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{source_kind} source, project {project}: {message}")]
pub struct SourceError {
    /// `fixture`, `http` or `crd`.
    pub source_kind: &'static str,
    /// The project asked for.
    pub project: String,
    /// What failed.
    pub message: String,
}

impl SourceError {
    /// An error of the `source_kind` source for `project`.
    pub(crate) fn new(
        source_kind: &'static str,
        project: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            source_kind,
            project: project.to_owned(),
            message: message.into(),
        }
    }
}

/// Refuses a project that is not a project name before a source builds a path, a URL or a
/// cache key from it (`..` would otherwise be a dot-segment the URL parser resolves away).
/// The sidecar refuses such names first; this keeps every source safe on its own.
pub(crate) fn check_project(source_kind: &'static str, project: &str) -> Result<(), SourceError> {
    capstan_api::check_project_name(project)
        .map_err(|error| SourceError::new(source_kind, project, error.to_string()))
}

/// Yields the capability documents entitled to a project, in first-wins order.
pub trait DocumentSource: Send + Sync {
    /// The project's documents and route qualifiers; `Err` only when nothing could be read.
    fn documents<'a>(&'a self, project: &'a str) -> BoxFuture<'a, Result<Snapshot, SourceError>>;
}

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
