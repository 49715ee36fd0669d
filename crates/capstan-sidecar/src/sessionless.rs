//! Tasks without a session, for the 2026-07-28 revision: no `initialize`, no `Mcp-Session-Id`,
//! every request carrying its own identity (the project header and the token, checked by the
//! middleware on each one). A caller's task is composed by its first request and kept for the
//! caller — keyed by the digest of project and token, so another token can never be served
//! another caller's composition — while requests keep coming.
//!
//! What "task" means without a session (docs/plan.md): one entry of this table, from the first
//! request of a (project, token) until [`DEFAULT_SESSIONLESS_TTL`] passes without a request —
//! or, while it has an open `subscriptions/listen` stream, until the session idle limit passes
//! without one (an open stream keeps a task as long as a session is kept, never forever) — or
//! the smallest `maxTaskDurationSeconds` of its bindings passes; the next request then starts
//! a new task, with new upstream sessions. It follows its bindings like a session
//! (`refresh.rs`) and tells its listen streams when its tools change. It holds a place, as
//! every listen stream does (`admission.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use tokio::sync::OnceCell;
use tracing::info;

use crate::admission::Place;
use crate::compose::ProjectComposer;
use crate::feeds::ProjectFeeds;
use crate::identity::Identity;
use crate::refresh;
use crate::sessions::Sessions;
use crate::task::{Served, Task};

/// How long a task without a session lives without a request. 60 s: the caller check's TTL,
/// and long enough that an assistant's turn (list, then a few calls) composes once.
pub const DEFAULT_SESSIONLESS_TTL: Duration = Duration::from_secs(60);

/// The tasks of callers without sessions.
pub struct SessionlessTasks {
    composer: Arc<ProjectComposer>,
    feeds: Arc<ProjectFeeds>,
    sessions: Arc<Sessions>,
    ttl: Duration,
    /// How long an open listen stream keeps a task without a request: the session idle limit.
    stream_ttl: Duration,
    entries: tokio::sync::Mutex<HashMap<[u8; 32], Entry>>,
}

/// One caller's task, or its composition in the making (concurrent first requests share it).
type Entry = Arc<OnceCell<Arc<Task>>>;

impl SessionlessTasks {
    /// The table, composing with `composer`, following documents on `feeds`, taking places
    /// from the admission of `sessions`; an entry unused for `ttl` ends — or, with a listen
    /// stream open, unused for `stream_ttl` (a reaper runs every quarter of `ttl`).
    pub fn new(
        composer: Arc<ProjectComposer>,
        feeds: Arc<ProjectFeeds>,
        sessions: Arc<Sessions>,
        ttl: Duration,
        stream_ttl: Duration,
    ) -> Arc<Self> {
        let table = Arc::new(Self {
            composer,
            feeds,
            sessions,
            ttl,
            stream_ttl: stream_ttl.max(ttl),
            entries: tokio::sync::Mutex::default(),
        });
        tokio::spawn(reap(Arc::downgrade(&table)));
        table
    }

    /// Whether `identity` has a task that may serve its next request (if not, the request
    /// composes one, which needs a place: the middleware takes it before rmcp sees the
    /// request, so a refusal is an HTTP 503/429, not a JSON-RPC error).
    pub async fn has_task(&self, identity: &Identity) -> bool {
        self.live(&identity.fingerprint()).await.is_some()
    }

    /// The task of `identity`: its live one, or one composed now (concurrent first requests
    /// of one caller compose once) in the place `offered` (taken by the middleware), else in
    /// one taken now. Refused when no place is left.
    pub async fn task(
        &self,
        identity: &Identity,
        offered: Option<Place>,
    ) -> Result<Arc<Task>, McpError> {
        let key = identity.fingerprint();
        let cell = {
            let mut entries = self.entries.lock().await;
            let cell = entries.entry(key).or_default();
            if cell.get().is_some_and(|task| !self.usable(task)) {
                *cell = Arc::default();
            }
            cell.clone()
        };
        let composed = cell
            .get_or_try_init(|| async {
                let permit = match offered {
                    Some(place) => place,
                    None => self
                        .sessions
                        .admit(identity)
                        .map_err(|full| McpError::internal_error(full.to_string(), None))?,
                };
                let project = self.composer.compose(identity).await;
                let task = Task::start(
                    self.composer.context().clone(),
                    identity.clone(),
                    Served::new(project.composed, project.base, project.snapshot),
                    Some(permit),
                );
                refresh::follow(&task, self.composer.clone(), &self.feeds);
                info!(project = %identity.project, tools = task.served().tools().len(), "task without a session started");
                Ok(task)
            })
            .await;
        let task = match composed {
            Ok(task) => task,
            Err(refused) => {
                // Nothing was started: the entry goes, so refused callers fill no table.
                let mut entries = self.entries.lock().await;
                if entries
                    .get(&key)
                    .is_some_and(|kept| Arc::ptr_eq(kept, &cell) && kept.get().is_none())
                {
                    entries.remove(&key);
                }
                return Err(refused);
            }
        };
        task.touch();
        Ok(task.clone())
    }

    /// The live task of the caller with `fingerprint`, if any (for inspection).
    pub async fn live(&self, fingerprint: &[u8; 32]) -> Option<Arc<Task>> {
        let entries = self.entries.lock().await;
        entries
            .get(fingerprint)
            .and_then(|cell| cell.get())
            .filter(|task| self.usable(task))
            .cloned()
    }

    /// Ends every task's upstream sessions (at shutdown); returns how many there were.
    pub async fn close_all(&self) -> usize {
        let entries = self.entries.lock().await;
        let live: Vec<&Arc<Task>> = entries.values().filter_map(|cell| cell.get()).collect();
        for task in &live {
            task.shutdown();
        }
        live.len()
    }

    /// Whether `task` may serve another request: within its time limit and its TTL (the
    /// longer one while a listen stream is open).
    fn usable(&self, task: &Task) -> bool {
        let ttl = if task.open_streams() > 0 {
            self.stream_ttl
        } else {
            self.ttl
        };
        !task.expired() && task.idle() < ttl
    }

    /// Ends the task of the caller with `fingerprint` at once (its caller was revoked): its
    /// upstream sessions and listen streams close, and the next request composes anew.
    pub async fn end(&self, fingerprint: &[u8; 32]) {
        let removed = self.entries.lock().await.remove(fingerprint);
        if let Some(task) = removed.as_ref().and_then(|cell| cell.get()) {
            task.shutdown();
        }
    }

    /// The live tasks with open listen streams: what the caller check re-checks between
    /// requests.
    pub async fn streaming(&self) -> Vec<Arc<Task>> {
        let entries = self.entries.lock().await;
        entries
            .values()
            .filter_map(|cell| cell.get())
            .filter(|task| task.open_streams() > 0 && self.usable(task))
            .cloned()
            .collect()
    }

    /// Drops the entries that may not serve again; their tasks end once no request holds
    /// them (their upstream sessions close).
    async fn reap_once(&self) -> usize {
        let mut entries = self.entries.lock().await;
        let before = entries.len();
        let mut ended = Vec::new();
        entries.retain(|_, cell| match cell.get() {
            Some(task) if self.usable(task) => true,
            Some(task) => {
                ended.push(task.clone());
                false
            }
            // Composing now (or failed to): kept until it is used or the next pass.
            None => Arc::strong_count(cell) > 1,
        });
        let removed = before - entries.len();
        drop(entries);
        // Idle past its limit (no call runs: a running call keeps it busy) or past its time
        // limit: its listen streams, which hold it, are closed with it.
        for task in &ended {
            task.shutdown();
        }
        removed
    }
}

/// Reaps the table every quarter of its TTL (1 s to 15 s) while it lives.
async fn reap(table: Weak<SessionlessTasks>) {
    loop {
        let Some(period) = table
            .upgrade()
            .map(|t| (t.ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(15)))
        else {
            return;
        };
        tokio::time::sleep(period).await;
        let Some(table) = table.upgrade() else { return };
        let ended = table.reap_once().await;
        if ended > 0 {
            info!(
                ended,
                "tasks without a session ended (unused or past their time limit)"
            );
        }
    }
}
