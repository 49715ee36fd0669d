//! A per-project cache in front of a document source (the crd source): TTL, the last good
//! answer served when a refresh fails, empty answers never cached, bounded with expired
//! entries evicted first.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tracing::warn;

use crate::source::DocumentSource;
use crate::source::snapshot::Snapshot;
use crate::source::{ProjectDocuments, ReadOutcome};

/// Default entry lifetime. 60 s: matches the SAR cache's TTL, so a revoked entitlement
/// lingers no longer than a revoked authorization already does.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// Default number of projects cached. One sidecar serves one assistant, usually one project
/// at a time; 64 leaves room for a shared sidecar without unbounded growth.
pub const DEFAULT_CAPACITY: usize = 64;

struct Entry {
    snapshot: Arc<Snapshot>,
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
    pub fn count(&self, outcome: ReadOutcome) -> u64 {
        let index = ReadOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(0);
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

    fn counted(&self, outcome: ReadOutcome) -> ReadOutcome {
        let index = ReadOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(0);
        self.counts[index].fetch_add(1, Ordering::Relaxed);
        outcome
    }

    /// The project's snapshot (documents and qualifiers) and how it was obtained.
    pub async fn documents(&self, project: &str) -> (Arc<Snapshot>, ReadOutcome) {
        {
            let entries = self.entries.lock().await;
            if let Some(entry) = entries.get(project)
                && entry.fetched.elapsed() < self.ttl
            {
                return (entry.snapshot.clone(), self.counted(ReadOutcome::Hit));
            }
        }
        // Fetch without holding the lock: one slow project must not stall the others.
        let fetched = self.inner.documents(project).await;
        let mut entries = self.entries.lock().await;
        match fetched {
            Ok(snapshot) if snapshot.is_empty() => {
                // An empty answer is the truth (no bindings, or not yet), never pinned for a
                // TTL; it also retires any older answer.
                entries.remove(project);
                (Arc::new(snapshot), self.counted(ReadOutcome::Empty))
            }
            Ok(snapshot) => {
                let snapshot = Arc::new(snapshot);
                if !entries.contains_key(project) {
                    self.make_room(&mut entries);
                }
                entries.insert(
                    project.to_owned(),
                    Entry {
                        snapshot: snapshot.clone(),
                        fetched: Instant::now(),
                    },
                );
                (snapshot, self.counted(ReadOutcome::Miss))
            }
            Err(error) => match entries.get(project) {
                Some(entry) => {
                    warn!(%error, age = ?entry.fetched.elapsed(), "serving the last good capability documents");
                    (
                        entry.snapshot.clone(),
                        self.counted(ReadOutcome::StaleServed),
                    )
                }
                None => {
                    warn!(%error, "capability documents unavailable; composing built-ins only");
                    (
                        Arc::new(Snapshot::default()),
                        self.counted(ReadOutcome::Error),
                    )
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

impl ProjectDocuments for CachedSource {
    fn read<'a>(&'a self, project: &'a str) -> BoxFuture<'a, (Arc<Snapshot>, ReadOutcome)> {
        Box::pin(self.documents(project))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex as StdMutex;

    use futures::future::BoxFuture;

    use super::*;
    use crate::source::SourceError;
    use crate::source::snapshot::Document;

    /// Answers each read with the next scripted result, per project.
    #[derive(Default)]
    struct Scripted {
        answers: StdMutex<HashMap<String, VecDeque<Result<usize, ()>>>>,
        reads: AtomicU64,
    }

    impl Scripted {
        fn script(&self, project: &str, answers: &[Result<usize, ()>]) {
            self.answers
                .lock()
                .unwrap()
                .insert(project.to_owned(), answers.iter().cloned().collect());
        }
    }

    fn docs(count: usize) -> Vec<Document> {
        let spec = serde_json::from_value(serde_json::json!({
            "serviceRef": {"name": "s"}, "serviceName": "s.example",
            "serviceAgentRef": {"name": "a"}, "configurationVersion": "v1"
        }))
        .unwrap();
        (0..count)
            .map(|i| Document {
                binding: format!("b{i}"),
                spec: Clone::clone(&spec),
            })
            .collect()
    }

    impl DocumentSource for Scripted {
        fn documents<'a>(
            &'a self,
            project: &'a str,
        ) -> BoxFuture<'a, Result<Snapshot, SourceError>> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            let answer = self
                .answers
                .lock()
                .unwrap()
                .get_mut(project)
                .and_then(VecDeque::pop_front)
                .unwrap_or(Err(()));
            Box::pin(async move {
                answer
                    .map(|n| Snapshot::of(docs(n)))
                    .map_err(|()| SourceError {
                        source_kind: "test",
                        project: project.to_owned(),
                        message: "down".into(),
                    })
            })
        }
    }

    fn cache(source: &Arc<Scripted>, capacity: usize) -> CachedSource {
        CachedSource::new(source.clone(), Duration::from_secs(60), capacity)
    }

    #[tokio::test(start_paused = true)]
    async fn cache_should_serve_hits_until_the_ttl_then_refetch() {
        let source = Arc::new(Scripted::default());
        source.script("p", &[Ok(2), Ok(3)]);
        let cache = cache(&source, 4);
        assert_eq!(cache.documents("p").await.1, ReadOutcome::Miss);
        tokio::time::advance(Duration::from_secs(59)).await;
        let (documents, outcome) = cache.documents("p").await;
        assert_eq!((documents.documents.len(), outcome), (2, ReadOutcome::Hit));
        tokio::time::advance(Duration::from_secs(1)).await;
        let (documents, outcome) = cache.documents("p").await;
        assert_eq!((documents.documents.len(), outcome), (3, ReadOutcome::Miss));
        assert_eq!(source.reads.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn cache_should_serve_the_last_good_answer_when_a_refresh_fails() {
        let source = Arc::new(Scripted::default());
        source.script("p", &[Ok(2), Err(()), Ok(1)]);
        let cache = cache(&source, 4);
        cache.documents("p").await;
        tokio::time::advance(Duration::from_secs(61)).await;
        let (documents, outcome) = cache.documents("p").await;
        assert_eq!(
            (documents.documents.len(), outcome),
            (2, ReadOutcome::StaleServed)
        );
        // The stale entry is not refreshed by serving it: the next read tries again.
        let (documents, outcome) = cache.documents("p").await;
        assert_eq!((documents.documents.len(), outcome), (1, ReadOutcome::Miss));
    }

    #[tokio::test(start_paused = true)]
    async fn cache_should_answer_nothing_on_a_failure_without_a_good_answer() {
        let source = Arc::new(Scripted::default());
        source.script("p", &[Err(())]);
        let cache = cache(&source, 4);
        let (documents, outcome) = cache.documents("p").await;
        assert_eq!(
            (documents.documents.len(), outcome),
            (0, ReadOutcome::Error)
        );
        assert!(cache.is_empty().await);
    }

    #[tokio::test(start_paused = true)]
    async fn cache_should_never_keep_an_empty_answer() {
        let source = Arc::new(Scripted::default());
        source.script("p", &[Ok(0), Ok(2), Ok(0), Err(())]);
        let cache = cache(&source, 4);
        assert_eq!(cache.documents("p").await.1, ReadOutcome::Empty);
        assert!(!cache.contains("p").await);
        // A newly entitled project is seen at once, not after a TTL of "nothing".
        assert_eq!(cache.documents("p").await.1, ReadOutcome::Miss);
        tokio::time::advance(Duration::from_secs(61)).await;
        // An empty answer retires the older one: a failure afterwards has nothing stale.
        assert_eq!(cache.documents("p").await.1, ReadOutcome::Empty);
        assert_eq!(cache.documents("p").await.1, ReadOutcome::Error);
        assert_eq!(cache.count(ReadOutcome::Empty), 2);
        assert_eq!(cache.count(ReadOutcome::Miss), 1);
        assert_eq!(cache.count(ReadOutcome::Error), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn cache_should_evict_expired_entries_first_then_the_oldest_live_one() {
        let source = Arc::new(Scripted::default());
        for project in ["a", "b", "c", "d", "e"] {
            source.script(project, &[Ok(1), Ok(1)]);
        }
        let cache = cache(&source, 3);
        cache.documents("a").await;
        tokio::time::advance(Duration::from_secs(30)).await;
        cache.documents("b").await;
        tokio::time::advance(Duration::from_secs(31)).await;
        // a has expired, b has not.
        cache.documents("c").await;
        cache.documents("d").await;
        assert!(!cache.contains("a").await, "the expired entry goes first");
        assert!(cache.contains("b").await && cache.contains("c").await);
        // Full of live entries: the oldest live one (b) makes room.
        cache.documents("e").await;
        assert_eq!(cache.len().await, 3);
        assert!(!cache.contains("b").await);
        assert!(
            cache.contains("c").await && cache.contains("d").await && cache.contains("e").await
        );
    }
}
