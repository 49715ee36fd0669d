//! A per-project cache in front of a document source: TTL, the last good answer served when a
//! refresh fails, empty answers never cached, bounded with expired entries evicted first.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;
use tracing::warn;

use crate::compose::Document;
use crate::source::DocumentSource;

/// How a read was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A fresh cached answer.
    Hit,
    /// Fetched from the source (and cached).
    Miss,
    /// The source failed; the last good answer was served.
    StaleServed,
    /// The source failed and nothing was cached: no documents.
    Error,
    /// The source answered with no documents (not cached).
    Empty,
}

impl Outcome {
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

    const ALL: [Outcome; 5] = [
        Self::Hit,
        Self::Miss,
        Self::StaleServed,
        Self::Error,
        Self::Empty,
    ];
}

/// Default entry lifetime. 60 s: matches the SAR cache's TTL, so a revoked entitlement
/// lingers no longer than a revoked authorization already does.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// Default number of projects cached. One sidecar serves one assistant, usually one project
/// at a time; 64 leaves room for a shared sidecar without unbounded growth.
pub const DEFAULT_CAPACITY: usize = 64;

struct Entry {
    documents: Arc<Vec<Document>>,
    fetched: Instant,
}

/// A cached source. Reads for different projects never wait on each other's fetches.
pub struct CachedSource {
    inner: Arc<dyn DocumentSource>,
    ttl: Duration,
    capacity: usize,
    entries: Mutex<HashMap<String, Entry>>,
    counts: [AtomicU64; 5],
}

impl std::fmt::Debug for CachedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedSource")
            .field("ttl", &self.ttl)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl CachedSource {
    /// Caches `inner` for `ttl`, holding at most `capacity` projects (at least one).
    pub fn new(inner: Arc<dyn DocumentSource>, ttl: Duration, capacity: usize) -> Self {
        Self {
            inner,
            ttl,
            capacity: capacity.max(1),
            entries: Mutex::new(HashMap::new()),
            counts: Default::default(),
        }
    }

    /// How many reads ended in `outcome` so far.
    pub fn count(&self, outcome: Outcome) -> u64 {
        let index = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.counts[index].load(Ordering::Relaxed)
    }

    /// Projects currently cached (expired or not).
    pub async fn len(&self) -> usize {
        self.entries.lock().await.len()
    }

    /// Whether nothing is cached.
    pub async fn is_empty(&self) -> bool {
        self.entries.lock().await.is_empty()
    }

    /// Whether `project` has an entry (expired or not).
    pub async fn contains(&self, project: &str) -> bool {
        self.entries.lock().await.contains_key(project)
    }

    fn counted(&self, outcome: Outcome) -> Outcome {
        let index = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.counts[index].fetch_add(1, Ordering::Relaxed);
        outcome
    }

    /// The project's documents and how they were obtained.
    pub async fn documents(&self, project: &str) -> (Arc<Vec<Document>>, Outcome) {
        {
            let entries = self.entries.lock().await;
            if let Some(entry) = entries.get(project)
                && entry.fetched.elapsed() < self.ttl
            {
                return (entry.documents.clone(), self.counted(Outcome::Hit));
            }
        }
        // Fetch without holding the lock: one slow project must not stall the others.
        let fetched = self.inner.documents(project).await;
        let mut entries = self.entries.lock().await;
        match fetched {
            Ok(documents) if documents.is_empty() => {
                // An empty answer is the truth (no bindings, or not yet), never pinned for a
                // TTL; it also retires any older answer.
                entries.remove(project);
                (Arc::new(Vec::new()), self.counted(Outcome::Empty))
            }
            Ok(documents) => {
                let documents = Arc::new(documents);
                if !entries.contains_key(project) {
                    self.make_room(&mut entries);
                }
                entries.insert(
                    project.to_owned(),
                    Entry {
                        documents: documents.clone(),
                        fetched: Instant::now(),
                    },
                );
                (documents, self.counted(Outcome::Miss))
            }
            Err(error) => match entries.get(project) {
                Some(entry) => {
                    warn!(%error, age = ?entry.fetched.elapsed(), "serving the last good capability documents");
                    (entry.documents.clone(), self.counted(Outcome::StaleServed))
                }
                None => {
                    warn!(%error, "capability documents unavailable; composing built-ins only");
                    (Arc::new(Vec::new()), self.counted(Outcome::Error))
                }
            },
        }
    }

    /// Frees one slot: every expired entry first; when none has expired, the oldest live one.
    fn make_room(&self, entries: &mut HashMap<String, Entry>) {
        if entries.len() < self.capacity {
            return;
        }
        entries.retain(|_, entry| entry.fetched.elapsed() < self.ttl);
        if entries.len() >= self.capacity
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, entry)| entry.fetched)
                .map(|(project, _)| project.clone())
        {
            entries.remove(&oldest);
        }
    }
}
