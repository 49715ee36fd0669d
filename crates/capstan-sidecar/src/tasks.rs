//! The task registry: every live task of the sidecar, in one table behind one lock — a
//! session's (bound to the session id the sidecar mints when `initialize` answers; the table
//! holds it, so forgetting the session — DELETE, idle, a revoked caller — ends it) and a
//! caller's without a session (the
//! 2026-07-28 revision; keyed by the digest of project and token, held here, composed by its
//! first request). One start function (`TaskStarter::start`) for both, one reaper pass, one
//! `close_all`.
//!
//! What "task" means without a session (docs/plan.md): one entry from the first request of a
//! (project, token) until [`DEFAULT_SESSIONLESS_TTL`] passes without a request — or, while it
//! has an open `subscriptions/listen` stream, the session idle limit (an open stream keeps a
//! task as long as a session is kept, never forever) — or its smallest
//! `maxTaskDurationSeconds` passes; the next request then starts a new task.

pub mod reaper;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_upstream::mcp::CallerRevision;
use capstan_upstream::mcp::ClientAsks;
use rmcp::ErrorData as McpError;
use tokio::sync::OnceCell;
use tracing::info;

use crate::caller::admission::{Admission, Place};
use crate::caller::identity::Identity;
use crate::composition::composer::{ComposedProject, ProjectComposer};
use crate::composition::feeds::ProjectFeeds;
use crate::composition::refresh;
use crate::task::{Served, Task};

/// How long a session may go without a request. 600 s: an assistant's task pauses for a
/// person's reply; a session's upstream connections are cheap to keep that long.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(600);

/// How long a task without a session lives without a request. 60 s: the caller check's TTL,
/// and long enough that an assistant's turn (list, then a few calls) composes once.
pub const DEFAULT_SESSIONLESS_TTL: Duration = Duration::from_secs(60);

/// How long tasks live without a request.
#[derive(Clone, Copy, Debug)]
pub struct Lifetimes {
    /// A session (`CAPSTAN_SESSION_IDLE_SECONDS`); also a task without a session that holds
    /// an open stream.
    pub session_idle: Duration,
    /// A task without a session (`CAPSTAN_SESSIONLESS_TTL_SECONDS`).
    pub sessionless: Duration,
}

impl Default for Lifetimes {
    /// The settings' defaults (`CAPSTAN_SESSION_IDLE_SECONDS`, `CAPSTAN_SESSIONLESS_TTL_SECONDS`).
    fn default() -> Self {
        Self {
            session_idle: DEFAULT_SESSION_IDLE,
            sessionless: DEFAULT_SESSIONLESS_TTL,
        }
    }
}

/// Starts tasks: composes the caller's project and starts the task that serves it and follows
/// its documents. The one start sequence for a session's `initialize` and a caller's first
/// request without one.
pub struct TaskStarter {
    composer: Arc<ProjectComposer>,
    feeds: Arc<ProjectFeeds>,
}

impl TaskStarter {
    /// A starter composing with `composer`, its tasks following documents on `feeds`.
    pub fn new(composer: Arc<ProjectComposer>, feeds: Arc<ProjectFeeds>) -> Arc<Self> {
        Arc::new(Self { composer, feeds })
    }

    /// Composes the project of `identity`, a caller of `revision`.
    pub async fn compose(&self, identity: &Identity, revision: CallerRevision) -> ComposedProject {
        self.composer.compose(identity, revision).await
    }

    /// Starts the task of `identity` serving `project` in `place`; `asks` is what a session's
    /// client declared it can be asked (none for a caller without a session).
    pub fn start(
        &self,
        identity: Identity,
        project: ComposedProject,
        place: Option<Place>,
        asks: Option<ClientAsks>,
    ) -> Arc<Task> {
        let task = Task::start(
            self.composer.context().clone(),
            identity,
            Served::new(project.composed, project.base, project.snapshot),
            place,
        );
        if let Some(asks) = asks {
            task.set_client_asks(asks);
        }
        refresh::follow(&task, self.composer.clone(), &self.feeds);
        task
    }
}

/// What the registry knows a task by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TaskKey {
    /// A session, by its id.
    Session(String),
    /// A caller without a session, by the digest of project and token.
    Caller([u8; 32]),
}

enum Slot {
    /// Bound when its `initialize` answered; the task lives while the session is bound (and
    /// while a call it serves runs).
    Session { task: Arc<Task>, created: Instant },
    /// The caller's task, or its composition in the making (concurrent first requests share
    /// it).
    Caller(Arc<OnceCell<Arc<Task>>>),
}

/// What a session id names, as the registry knows it.
pub enum Lookup {
    /// A live session's task.
    Bound(Arc<Task>),
    /// Not bound (never, or no longer): nothing of this session is served.
    Unbound,
}

/// What the gate admitted a request to open, handed to the handler that opens it (in the
/// request's `Checked`, `edge/request.rs`): the place a new task takes, and — left by
/// `initialize` — the task started, which the gate binds to the session id it mints for the
/// answer. It holds the task until then.
#[derive(Clone, Default)]
pub struct Admitted(Arc<AdmittedInner>);

#[derive(Default)]
struct AdmittedInner {
    place: Mutex<Option<Place>>,
    task: std::sync::OnceLock<Arc<Task>>,
}

impl Admitted {
    /// Admitted with `place` for the task the request starts.
    pub fn with_place(place: Place) -> Self {
        let admitted = Self::default();
        if let Ok(mut slot) = admitted.0.place.lock() {
            *slot = Some(place);
        }
        admitted
    }

    /// Takes the place (once): the task started keeps it for its life.
    pub fn take_place(&self) -> Option<Place> {
        self.0.place.lock().ok().and_then(|mut place| place.take())
    }

    /// Leaves the task `initialize` started, for the gate to bind.
    pub fn started(&self, task: &Arc<Task>) {
        let _ = self.0.task.set(task.clone());
    }

    /// The task `initialize` started.
    pub fn task(&self) -> Option<Arc<Task>> {
        self.0.task.get().cloned()
    }
}

/// The registry could not be read: a panic poisoned its lock. Callers refuse the request.
#[derive(Debug)]
pub struct Poisoned;

/// Every live task, and the admission they take their places from.
pub struct Tasks {
    admission: Arc<Admission>,
    lifetimes: Lifetimes,
    table: Mutex<HashMap<TaskKey, Slot>>,
}

impl Tasks {
    /// An empty registry whose tasks take places from `admission` and live `lifetimes`.
    pub fn new(admission: Arc<Admission>, lifetimes: Lifetimes) -> Self {
        Self {
            admission,
            lifetimes,
            table: Mutex::default(),
        }
    }

    /// Who may open what: the project header, the caller check, the places.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// How long tasks live without a request.
    pub fn lifetimes(&self) -> Lifetimes {
        self.lifetimes
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<TaskKey, Slot>>, Poisoned> {
        self.table.lock().map_err(|_| Poisoned)
    }

    /// What the registry knows of session `id`.
    pub fn session(&self, id: &str) -> Result<Lookup, Poisoned> {
        let table = self.lock()?;
        Ok(match table.get(&TaskKey::Session(id.to_owned())) {
            Some(Slot::Session { task, .. }) => Lookup::Bound(task.clone()),
            _ => Lookup::Unbound,
        })
    }

    /// Binds session `id` to `task` (its `initialize` answered).
    pub fn bind_session(&self, id: &str, task: &Arc<Task>) -> Result<(), Poisoned> {
        self.lock()?.insert(
            TaskKey::Session(id.to_owned()),
            Slot::Session {
                task: task.clone(),
                created: Instant::now(),
            },
        );
        Ok(())
    }

    /// Ends the task known by `key` at once — a session's DELETE, or the sidecar's decision
    /// (its caller was revoked): forgotten, its upstream sessions and streams closed; a
    /// session's next request is 404.
    pub fn end(&self, key: &TaskKey) {
        let removed = self.lock().ok().and_then(|mut table| table.remove(key));
        let task = match removed {
            Some(Slot::Session { task, .. }) => Some(task),
            Some(Slot::Caller(cell)) => cell.get().cloned(),
            None => None,
        };
        if let Some(task) = task {
            task.shutdown();
        }
    }

    /// Whether `identity` has a task without a session that may serve its next request (if
    /// not, the request composes one, which needs a place).
    pub fn has_caller_task(&self, identity: &Identity) -> bool {
        self.caller_task_now(&identity.fingerprint()).is_some()
    }

    fn caller_task_now(&self, fingerprint: &[u8; 32]) -> Option<Arc<Task>> {
        let table = self.lock().ok()?;
        match table.get(&TaskKey::Caller(*fingerprint)) {
            Some(Slot::Caller(cell)) => cell.get().filter(|task| self.usable(task)).cloned(),
            _ => None,
        }
    }

    /// The task without a session of `identity`: its live one, or one composed and started
    /// now by `starter` (concurrent first requests compose once) in the place `offered`, else
    /// in one taken now. Refused when no place is left.
    pub async fn caller_task(
        &self,
        identity: &Identity,
        offered: Option<Place>,
        starter: &TaskStarter,
    ) -> Result<Arc<Task>, McpError> {
        let key = TaskKey::Caller(identity.fingerprint());
        let cell = {
            let mut table = self
                .lock()
                .map_err(|_| McpError::internal_error("the task registry is unreadable", None))?;
            let slot = table
                .entry(key.clone())
                .or_insert_with(|| Slot::Caller(Arc::default()));
            let Slot::Caller(cell) = slot else {
                return Err(McpError::internal_error("a session key for a caller", None));
            };
            if cell.get().is_some_and(|task| !self.usable(task)) {
                *cell = Arc::default();
            }
            cell.clone()
        };
        let started = cell
            .get_or_try_init(|| async {
                let place = match offered {
                    Some(place) => place,
                    None => self
                        .admission
                        .admit(identity)
                        .map_err(|full| McpError::internal_error(full.to_string(), None))?,
                };
                let project = starter.compose(identity, CallerRevision::Stateless).await;
                let task = starter.start(identity.clone(), project, Some(place), None);
                info!(project = %identity.project, tools = task.served().tools().len(), "task without a session started");
                Ok::<_, McpError>(task)
            })
            .await;
        match started {
            Ok(task) => {
                task.touch();
                Ok(task.clone())
            }
            Err(refused) => {
                // Nothing was started: the entry goes, so refused callers fill no table.
                if let Ok(mut table) = self.lock()
                    && matches!(table.get(&key), Some(Slot::Caller(kept)) if Arc::ptr_eq(kept, &cell) && kept.get().is_none())
                {
                    table.remove(&key);
                }
                Err(refused)
            }
        }
    }

    /// The live task of the caller with `fingerprint`: its newest session's, else its task
    /// without a session (for inspection).
    pub fn live_task(&self, fingerprint: &[u8; 32]) -> Option<Arc<Task>> {
        let newest_session = {
            let table = self.lock().ok()?;
            table
                .values()
                .filter_map(|slot| match slot {
                    Slot::Session { task, created } => Some((*created, task.clone())),
                    Slot::Caller(_) => None,
                })
                .filter(|(_, task)| task.identity().fingerprint() == *fingerprint)
                .max_by_key(|(created, _)| *created)
                .map(|(_, task)| task)
        };
        newest_session.or_else(|| self.caller_task_now(fingerprint))
    }

    /// The live tasks holding open streams, by key: what the caller check re-checks between
    /// requests (a stream receives without asking).
    pub fn streaming(&self) -> Vec<(TaskKey, Arc<Task>)> {
        let Ok(table) = self.lock() else {
            return Vec::new();
        };
        table
            .iter()
            .filter_map(|(key, slot)| {
                let task = match slot {
                    Slot::Session { task, .. } => task.clone(),
                    Slot::Caller(cell) => cell.get().filter(|t| self.usable(t))?.clone(),
                };
                (task.open_streams() > 0).then(|| (key.clone(), task))
            })
            .collect()
    }

    /// One pass of the reaper over the table: sessions idle for the session idle limit (never
    /// while a call runs) are forgotten, and tasks without a session that may not serve again
    /// are dropped; both are shut down (their streams close). Returns (sessions ended, tasks
    /// without a session ended).
    pub fn reap(&self) -> (usize, usize) {
        let Ok(mut table) = self.lock() else {
            return (0, 0);
        };
        let mut sessions = Vec::new();
        let mut ended = Vec::new();
        table.retain(|_, slot| match slot {
            Slot::Session { task, .. } => {
                let idle = task.idle() >= self.lifetimes.session_idle;
                if idle {
                    sessions.push(task.clone());
                }
                !idle
            }
            Slot::Caller(cell) => match cell.get() {
                Some(task) if self.usable(task) => true,
                Some(task) => {
                    ended.push(task.clone());
                    false
                }
                // Composing now (or failed to): kept until it is used or the next pass.
                None => Arc::strong_count(cell) > 1,
            },
        });
        drop(table);
        for task in sessions.iter().chain(&ended) {
            task.shutdown();
        }
        (sessions.len(), ended.len())
    }

    /// Ends the upstream sessions of every live task (at shutdown, once the grace period for
    /// in-flight requests is over); returns how many tasks there were.
    pub fn close_all(&self) -> usize {
        let Ok(table) = self.lock() else {
            return 0;
        };
        let live: Vec<Arc<Task>> = table
            .values()
            .filter_map(|slot| match slot {
                Slot::Session { task, .. } => Some(task.clone()),
                Slot::Caller(cell) => cell.get().cloned(),
            })
            .collect();
        drop(table);
        for task in &live {
            task.shutdown();
        }
        live.len()
    }

    /// Whether a task without a session may serve another request: within its time limit
    /// and its lifetime (the session idle limit while a listen stream is open).
    fn usable(&self, task: &Task) -> bool {
        let lifetime = if task.open_streams() > 0 {
            self.lifetimes.session_idle.max(self.lifetimes.sessionless)
        } else {
            self.lifetimes.sessionless
        };
        !task.expired() && task.idle() < lifetime
    }

    /// Entries in the table: sessions, and callers without one (composed or composing).
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.lock().map(|table| table.len()).unwrap_or(0)
    }

    #[cfg(test)]
    pub(crate) fn poison(self: &Arc<Self>) {
        let tasks = self.clone();
        let _ = std::thread::spawn(move || {
            let _held = tasks.table.lock();
            panic!("poisoning the task registry for the test");
        })
        .join();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use crate::caller::admission::Caps;

    fn tasks() -> Arc<Tasks> {
        tasks_with(Caps::default())
    }

    fn tasks_with(caps: Caps) -> Arc<Tasks> {
        let admission = Admission::new(
            axum::http::HeaderName::from_static("x-capstan-project"),
            caps,
        );
        Arc::new(Tasks::new(admission, Lifetimes::default()))
    }

    #[test]
    fn sessions_should_be_admitted_up_to_the_cap_and_again_when_one_ends() {
        let tasks = tasks_with(Caps {
            total: 2,
            ..Caps::default()
        });
        let caller = Identity::new("p".into(), Some("t"));
        let first = tasks.admission().admit(&caller).unwrap();
        let _second = tasks.admission().admit(&caller).unwrap();
        assert!(tasks.admission().admit(&caller).is_err());
        drop(first);
        assert!(tasks.admission().admit(&caller).is_ok());
    }

    /// A starter over a source that holds nothing (its tasks serve no tools); a refused
    /// caller never reaches it.
    pub(crate) fn starter() -> Arc<TaskStarter> {
        capstan_core::install_crypto_provider();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::observe::metrics::Metrics::register(&mut registry);
        let documents: Arc<dyn capstan_compose::source::ProjectDocuments> =
            Arc::new(capstan_compose::source::Uncached::new(Arc::new(
                capstan_compose::source::FixtureSource::new("/nonexistent/documents.json"),
            )));
        let composer = capstan_compose::composer::Composer::from_allow_lists(
            "",
            "",
            capstan_compose::limits::Limits::default(),
        )
        .unwrap();
        let context = crate::task::TaskContext {
            metrics: metrics.clone(),
            meter: Arc::new(crate::observe::metering::Meter::open("off").unwrap()),
            clock: Instant::now(),
            decisions: Arc::new(crate::routing::decisions::DecisionLog::new(2)),
            states: Arc::default(),
            authorizer: None,
            limits: Arc::new(crate::limits::CallGates::new(Default::default())),
            audit: Arc::new(crate::observe::audit::Audit::open("off", Default::default()).unwrap()),
            names: Arc::new(crate::caller::names::CallerNames::new(None)),
            search: crate::task::ToolSearch {
                min_tools: crate::task::DEFAULT_MIN_TOOLS,
                threshold: crate::task::DEFAULT_THRESHOLD,
                rate: None,
            },
            gaps: Arc::new(
                crate::task::gaps::GapReports::open(
                    "off",
                    crate::task::gaps::GapPolicy {
                        window: Duration::from_secs(60),
                        per_caller_per_hour: 1,
                    },
                )
                .unwrap(),
            ),
        };
        let composer = Arc::new(ProjectComposer::new(documents.clone(), composer, context));
        TaskStarter::new(composer, ProjectFeeds::new(documents, None, metrics))
    }

    /// A first request without a session refused at the cap starts nothing, and its entry
    /// goes with the refusal: callers refused at the cap cannot grow the table until the next
    /// reap.
    #[tokio::test]
    async fn a_caller_refused_at_the_cap_should_leave_no_entry_behind() {
        let tasks = tasks_with(Caps {
            total: 1,
            ..Caps::default()
        });
        let _held = tasks
            .admission()
            .admit(&Identity::new("p".into(), Some("holder")))
            .unwrap();
        let starter = starter();
        for token in ["a", "b", "c"] {
            let caller = Identity::new("p".into(), Some(token));
            let refused = tasks.caller_task(&caller, None, &starter).await;
            let message = refused
                .err()
                .map(|e| e.message.to_string())
                .unwrap_or_default();
            assert!(message.contains("CAPSTAN_MAX_SESSIONS"), "{message}");
        }
        assert_eq!(tasks.entries(), 0);
    }

    #[test]
    fn an_unknown_session_should_be_unbound_and_a_poisoned_table_an_error() {
        let tasks = tasks();
        assert!(matches!(tasks.session("nope"), Ok(Lookup::Unbound)));
        assert!(!tasks.has_caller_task(&Identity::new("p".into(), Some("t"))));
        tasks.poison();
        assert!(tasks.session("nope").is_err());
        assert_eq!(tasks.close_all(), 0);
    }
}
