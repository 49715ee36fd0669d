//! Tasks without a session, for the 2026-07-28 revision: no `initialize`, no `Mcp-Session-Id`,
//! every request carrying its own identity (the project header and the token, checked by the
//! middleware on each one). A caller's task is composed by its first request and kept for the
//! caller — keyed by the digest of project and token, so another token can never be served
//! another caller's composition — while requests keep coming.
//!
//! What "task" means without a session (docs/plan.md): one entry of this table, from the first
//! request of a (project, token) until [`DEFAULT_SESSIONLESS_TTL`] passes without a request (an
//! open `subscriptions/listen` stream counts as activity) or the smallest
//! `maxTaskDurationSeconds` of its bindings passes; the next request then starts a new task,
//! with new upstream sessions. It follows its bindings like a session (`refresh.rs`) and tells
//! its listen streams when its tools change. It holds a place under the session cap.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use tokio::sync::OnceCell;
use tracing::info;

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
    entries: tokio::sync::Mutex<HashMap<[u8; 32], Entry>>,
}

/// One caller's task, or its composition in the making (concurrent first requests share it).
type Entry = Arc<OnceCell<Arc<Task>>>;

impl SessionlessTasks {
    /// The table, composing with `composer`, following documents on `feeds`, taking places
    /// under the cap of `sessions`; an entry unused for `ttl` ends (a reaper runs every quarter
    /// of it).
    pub fn new(
        composer: Arc<ProjectComposer>,
        feeds: Arc<ProjectFeeds>,
        sessions: Arc<Sessions>,
        ttl: Duration,
    ) -> Arc<Self> {
        let table = Arc::new(Self {
            composer,
            feeds,
            sessions,
            ttl,
            entries: tokio::sync::Mutex::default(),
        });
        tokio::spawn(reap(Arc::downgrade(&table)));
        table
    }

    /// The task of `identity`: its live one, or one composed now (concurrent first requests
    /// of one caller compose once). Refused when the session cap is reached.
    pub async fn task(&self, identity: &Identity) -> Result<Arc<Task>, McpError> {
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
                let Some(permit) = self.sessions.admit() else {
                    return Err(McpError::internal_error(
                        format!(
                            "{} sessions and tasks are open, the most this sidecar serves \
                             (CAPSTAN_MAX_SESSIONS); retry later",
                            self.sessions.max_sessions()
                        ),
                        None,
                    ));
                };
                let project = self.composer.compose(identity).await;
                let task = Task::start(
                    self.composer.context().clone(),
                    identity.clone(),
                    Served::new(project.composed, project.snapshot),
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

    /// Whether `task` may serve another request: within its time limit and its TTL.
    fn usable(&self, task: &Task) -> bool {
        !task.expired() && task.idle() < self.ttl
    }

    /// Drops the entries that may not serve again; their tasks end once no request holds
    /// them (their upstream sessions close).
    async fn reap_once(&self) -> usize {
        let mut entries = self.entries.lock().await;
        let before = entries.len();
        entries.retain(|_, cell| match cell.get() {
            Some(task) => self.usable(task),
            // Composing now (or failed to): kept until it is used or the next pass.
            None => Arc::strong_count(cell) > 1,
        });
        before - entries.len()
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
