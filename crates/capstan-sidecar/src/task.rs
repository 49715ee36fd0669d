//! A task: one MCP session's composition and who it is for, and its lifecycle — the idle
//! clock, the time limit, the permit it holds, its end. Its other concerns each have a file:
//! what it serves (`task/served.rs`), how it answers a `tools/call` (`task/call.rs`), the calls
//! running and the questions they ask (`task/in_flight.rs`, `task/questions.rs`), how it tells
//! its client (`task/streams.rs`) and the resources its client follows
//! (`task/subscriptions.rs`). The session's end (`Tasks::end`) shuts the task down, which
//! closes its upstream sessions and its GET stream.

mod authorized;
mod call;
mod gap_report;
pub mod gaps;
mod in_flight;
mod listener;
mod outbox;
mod questions;
pub mod request_states;
mod search;
mod served;
mod streams;
mod subscriptions;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use capstan_compose::source::Document;
use capstan_upstream::mcp::ClientAsks;
use serde_json::Value;
use tracing::info;

pub use self::authorized::Decision;
pub use self::call::usable_candidates;
pub use self::gap_report::report_gap_tool;
use self::in_flight::InFlight;
pub use self::listener::Listener;
use self::outbox::Outbox;
pub use self::search::{
    DEFAULT_CALLS_PER_MINUTE, DEFAULT_MIN_TOOLS, DEFAULT_THRESHOLD, Listing, ToolSearch,
    find_tools_tool,
};
pub use self::served::Served;
pub use self::streams::OpenStream;
pub use self::subscriptions::MAX_SUBSCRIPTIONS;
use crate::caller::admission::Place;
use crate::caller::authorization::{ToolAuthorizer, Withheld};
use crate::caller::identity::Identity;
use crate::caller::names::CallerNames;
use crate::limits::CallGates;
use crate::observe::audit::{Audit, Named};
use crate::observe::metering::Meter;
use crate::observe::metrics::Metrics;
use crate::routing::decisions::DecisionLog;
use crate::task::gaps::GapReports;
use crate::task::request_states::RequestStates;

/// The one refusal of a request (or call) whose caller is not the task's: another project or
/// token than the session was started with.
pub const ANOTHER_CALLER: &str = "this session belongs to another project or caller: the \
     project and token must be the ones sent with `initialize`";

/// The built-in that fetches a skill's body.
pub const LOAD_SKILL: &str = "load_skill";

/// What every task shares: metrics, the metering sink and the zero point of idle clocks.
#[derive(Clone)]
pub struct TaskContext {
    /// The sidecar's metrics.
    pub metrics: Metrics,
    /// Where tool-invocation events go.
    pub meter: Arc<Meter>,
    /// Zero point of the sessions' idle clocks.
    pub clock: Instant,
    /// Routing decisions, for `GET /v1/route-decisions`.
    pub decisions: Arc<DecisionLog>,
    /// Seals the `requestState` of the questions its callers are asked (`task/request_states.rs`).
    pub states: Arc<RequestStates>,
    /// Decides what each caller may use, with per-tool authorization on
    /// (`caller/authorization.rs`); without it every admitted caller uses everything.
    pub authorizer: Option<Arc<ToolAuthorizer>>,
    /// The limits on calls to providers' servers, counted across every task
    /// (`limits.rs`): a caller cannot escape them by opening another session.
    pub limits: Arc<CallGates>,
    /// Where each call's audit line goes (`observe/audit.rs`).
    pub audit: Arc<Audit>,
    /// Who callers are by name, for their audit lines.
    pub names: Arc<CallerNames>,
    /// When `find_tools` is offered (docs/tool-search.md).
    pub search: ToolSearch,
    /// Where capability-gap reports go, and what was reported lately.
    pub gaps: Arc<GapReports>,
}

impl TaskContext {
    /// The built-in tools a caller of `served` who may not use `withheld` is listed, by name:
    /// `load_skill` when the project has skills, `find_tools` when it is offered to the caller
    /// and `report_capability_gap` when a binding names where reports go — what
    /// `GET /v1/composition` shows beside the composed tools.
    pub fn built_ins(&self, served: &Served, withheld: &Withheld) -> Vec<&'static str> {
        let mut names = Vec::new();
        if !served.composed().composition.skills.is_empty() {
            names.push(LOAD_SKILL);
        }
        if self.search.offered(served, withheld) {
            names.push(search::FIND_TOOLS);
        }
        if gap_report::offered(served, &self.gaps) {
            names.push(gap_report::REPORT_GAP);
        }
        names
    }
}

/// A task: what the session serves now, and who it is for.
pub struct Task {
    context: TaskContext,
    identity: Identity,
    /// What the session serves; replaced whole when its composition changes
    /// (`composition/refresh.rs`), while calls already running finish on the one they started with.
    served: RwLock<Arc<Served>>,
    max_duration: Option<Duration>,
    /// Set once, when the time limit passes; calls running then are cut (`task/call.rs`).
    expired: tokio::sync::watch::Sender<bool>,
    /// Milliseconds since `TaskContext::clock` at the session's last request.
    last_used: AtomicU64,
    /// Calls running now.
    busy: AtomicUsize,
    /// This session's place among the open sessions, released when the task ends.
    _permit: Option<Place>,
    /// Streams open now (a session's GET streams, `subscriptions/listen` streams).
    streams: Arc<AtomicUsize>,
    /// What the session's open GET streams have yet to send: its list changes and resource
    /// updates, each once (`task/outbox.rs`, `edge/session_stream.rs`).
    outbox: Arc<Outbox>,
    /// The open `subscriptions/listen` streams of a task without a session (2026-07-28), each
    /// told of list changes; keyed so each stream removes its own when it ends.
    listeners: Mutex<Vec<(u64, Listener)>>,
    next_listener: AtomicU64,
    /// Sent to when the task is shut down, dropped with it: those following it
    /// (`composition/refresh.rs`, listen streams) stop.
    ended: tokio::sync::watch::Sender<()>,
    /// The level the client asked for with `logging/setLevel`, sent again to the upstreams of
    /// every later composition.
    log_level: Mutex<Option<Value>>,
    /// The calls of the session being served, for the caller's `notifications/cancelled`, and
    /// the providers' questions put to the caller.
    in_flight: InFlight,
    /// What the caller can be asked, read from its `initialize` (nothing without a session).
    asks: OnceLock<ClientAsks>,
    /// The resources the task's client subscribed to, by the URIs it knows them by: in a
    /// session once each (`resources/subscribe`), without one by how many of its open listen
    /// streams hold it.
    subscriptions: Mutex<BTreeMap<String, usize>>,
    /// Who the task's caller is by name, asked once, on its first audited call.
    named: tokio::sync::OnceCell<Named>,
    /// What of its composition the caller may not use, and for which composition
    /// (`task/authorized.rs`).
    decided: tokio::sync::Mutex<Option<authorized::Decided>>,
}

/// Counts a running call; the session is touched again when it ends (the gate
/// touched it when the request arrived).
struct Busy<'a>(&'a Task);

impl<'a> Busy<'a> {
    fn new(task: &'a Task) -> Self {
        task.busy.fetch_add(1, Ordering::AcqRel);
        Self(task)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // The session ended (DELETE or idle timeout): close its upstream sessions now, even
        // if a refresh still holds the composition for a moment.
        self.shutdown();
        self.context.metrics.sessions_active.dec();
        info!(project = %self.identity.project, "session ended; upstreams closed");
    }
}

/// The smallest `authority.maxTaskDurationSeconds` among the documents.
fn max_task_duration(documents: &[Document]) -> Option<Duration> {
    documents
        .iter()
        .filter_map(|d| d.spec.authority.as_ref()?.max_task_duration_seconds)
        .filter(|seconds| *seconds > 0)
        .min()
        .map(|seconds| Duration::from_secs(u64::from(seconds)))
}

impl Task {
    /// The task of `identity` serving `served`, holding `permit` for its life. Starts the
    /// clock of the smallest `maxTaskDurationSeconds`, if any.
    pub fn start(
        context: TaskContext,
        identity: Identity,
        served: Served,
        permit: Option<Place>,
    ) -> Arc<Self> {
        let max_duration = max_task_duration(&served.snapshot().documents);
        context.metrics.sessions_active.inc();
        context.metrics.sessions_total.inc();
        let task = Arc::new(Self {
            context,
            identity,
            served: RwLock::new(Arc::new(served)),
            max_duration,
            expired: tokio::sync::watch::channel(false).0,
            last_used: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            _permit: permit,
            streams: Arc::default(),
            outbox: Arc::default(),
            listeners: Mutex::default(),
            next_listener: AtomicU64::new(0),
            ended: tokio::sync::watch::channel(()).0,
            log_level: Mutex::default(),
            in_flight: InFlight::default(),
            asks: OnceLock::new(),
            subscriptions: Mutex::new(BTreeMap::new()),
            decided: tokio::sync::Mutex::default(),
            named: tokio::sync::OnceCell::new(),
        });
        task.touch();
        if let Some(limit) = max_duration {
            let weak: Weak<Task> = Arc::downgrade(&task);
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                if let Some(task) = weak.upgrade() {
                    task.expired.send_replace(true);
                    task.shutdown();
                    info!(project = %task.identity.project, ?limit, "task time limit reached; upstreams closed");
                }
            });
        }
        task
    }

    /// The built-in tools this task lists with `served` to a caller who may not use
    /// `withheld` ([`TaskContext::built_ins`]).
    pub fn built_ins(&self, served: &Served, withheld: &Withheld) -> Vec<&'static str> {
        self.context.built_ins(served, withheld)
    }

    /// Whether this task offers `report_capability_gap` with `served`.
    pub fn reports_gaps(&self, served: &Served) -> bool {
        gap_report::offered(served, &self.context.gaps)
    }

    /// When this task offers `find_tools`.
    pub fn tool_search(&self) -> &ToolSearch {
        &self.context.search
    }

    /// What the session serves now.
    pub fn served(&self) -> Arc<Served> {
        match self.served.read() {
            Ok(served) => served.clone(),
            // Only an `Arc` is ever written under the lock, so a panic cannot leave it half
            // written: the value is whole.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Serves `served` from now on (calls running finish on what they started with); returns
    /// what was served before.
    pub fn replace(&self, served: Served) -> Arc<Served> {
        let served = Arc::new(served);
        let mut slot = match self.served.write() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::mem::replace(&mut *slot, served)
    }

    /// `logging/setLevel`: remembered, and sent to every upstream session of what the task
    /// serves whose server declared `logging`.
    pub async fn set_log_level(&self, level: Value) {
        let served = self.served();
        served.composed().set_log_level(&level).await;
        *lock(&self.log_level) = Some(level);
    }

    /// The level the client asked for, if it did.
    pub fn log_level(&self) -> Option<Value> {
        lock(&self.log_level).clone()
    }

    /// Ends the upstream sessions of what the session serves (later calls to provider tools
    /// fail as unavailable), and tells those following the task that it has ended.
    pub fn shutdown(&self) {
        self.served().composed().shutdown();
        self.ended.send_replace(());
    }

    /// Whether the task's time limit has passed (its upstream sessions are closed).
    pub fn expired(&self) -> bool {
        *self.expired.borrow()
    }

    /// Completes when the task's time limit passes (never, for a task without one).
    pub async fn until_expired(&self) {
        // The task holds the sender, so the channel cannot close while `self` is borrowed.
        let _ = self.expired.subscribe().wait_for(|expired| *expired).await;
    }

    /// Keeps what the session's client declared it can be asked at `initialize` (once).
    pub fn set_client_asks(&self, asks: ClientAsks) {
        let _ = self.asks.set(asks);
    }

    /// A receiver that changes when the task is shut down (time limit, sidecar shutdown) and
    /// closes when the task is dropped: either way, it has ended.
    pub fn ended(&self) -> tokio::sync::watch::Receiver<()> {
        self.ended.subscribe()
    }

    /// Who the task is for.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Whether `caller` is who the task is for (the same project and token): the one check
    /// the gate, the rmcp handler and a call each make.
    pub fn owned_by(&self, caller: Option<&Identity>) -> bool {
        caller.is_some_and(|caller| caller.is_same_caller(&self.identity))
    }

    /// Marks the session as used now (the idle timeout counts from the last request).
    pub fn touch(&self) {
        let now = self.context.clock.elapsed().as_millis();
        self.last_used
            .store(u64::try_from(now).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// How long the session has been idle: zero while a call runs, else the time since its
    /// last request or call.
    pub fn idle(&self) -> Duration {
        if self.busy.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let now = self.context.clock.elapsed().as_millis();
        let now = u64::try_from(now).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(self.last_used.load(Ordering::Relaxed)))
    }
}

/// The value behind `mutex`, whole even if a holder panicked (only whole values are written).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
