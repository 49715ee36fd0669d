//! A task: one MCP session's composition and who it is for, and its lifecycle — the idle
//! clock, the time limit, its streams and listeners, the permit it holds. What it serves is
//! `task/served.rs`; how it answers a `tools/call` (dispatch, routing, metering) is
//! `task/call.rs`. The session's end (`Tasks::end`) shuts the task down, which closes its
//! upstream sessions and its GET stream.

mod call;
mod in_flight;
mod listener;
mod outbox;
mod questions;
pub mod request_states;
mod served;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use capstan_compose::source::Document;
use capstan_upstream::mcp::ClientAsks;
use serde_json::Value;
use tracing::{debug, info, warn};

use self::in_flight::InFlight;
pub use self::listener::Listener;
use self::listener::Unsent;
pub use self::outbox::SessionStream;
use self::outbox::{Change, Outbox};
pub use self::served::Served;
use crate::caller::admission::{Full, Place};
use crate::caller::identity::Identity;
use crate::observe::metering::Meter;
use crate::observe::metrics::Metrics;
use crate::routing::decisions::DecisionLog;
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
}

/// The most resources one session may subscribe to at once: a template can name unboundedly
/// many URIs, and each subscription is held for the session's life.
pub const MAX_SUBSCRIPTIONS: usize = 256;

/// An open `subscriptions/listen` stream of a task ([`Task::listen`]); forgotten on drop.
pub struct Listening<'a> {
    task: &'a Task,
    id: u64,
}

/// One stream a task holds open, counted against its cap; given back on drop.
pub struct OpenStream(Arc<AtomicUsize>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.task.forget_listener(self.id);
    }
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

    /// Opens a GET stream of the session: the messages for the session from now on, until the
    /// task ends or the client leaves. A session may hold several (its streams' cap,
    /// `caller/admission.rs`); each message goes on one of them.
    pub fn open_session_stream(&self) -> SessionStream {
        self.outbox.open()
    }

    /// Tells the task's client that its tools changed: on the session's GET stream, and on
    /// every open `subscriptions/listen` stream (a stream that is gone is dropped).
    pub fn notify_tool_list_changed(&self) {
        self.tell(Change::ToolList);
    }

    /// Tells the task's client of `change`: on the session's GET streams (its outbox), and on
    /// every open `subscriptions/listen` stream (each its own outbox). Nothing here waits on a
    /// client slow to read: an outbox keeps each change once.
    fn tell(&self, change: Change) {
        self.outbox.note(change.clone());
        self.tell_listeners(&change);
    }

    /// Tells every open `subscriptions/listen` stream that asked for it of `change`; a stream
    /// that did not ask is skipped, a stream that is gone is dropped.
    fn tell_listeners(&self, change: &Change) {
        lock(&self.listeners).retain(|(_, listener)| match listener.send(change) {
            Ok(()) | Err(Unsent::NotAccepted) => true,
            Err(Unsent::Gone) => {
                debug!(project = %self.identity.project, "a listen stream is gone");
                false
            }
        });
    }

    /// Notes the session's subscription to `uri` (as it named it); false when it already
    /// holds [`MAX_SUBSCRIPTIONS`] others.
    pub fn subscribe(&self, uri: &str) -> bool {
        let mut subscriptions = lock(&self.subscriptions);
        if subscriptions.len() >= MAX_SUBSCRIPTIONS && !subscriptions.contains_key(uri) {
            return false;
        }
        subscriptions.insert(uri.to_owned(), 1);
        true
    }

    /// Forgets the session's subscription to `uri`.
    pub fn unsubscribe(&self, uri: &str) {
        lock(&self.subscriptions).remove(uri);
        self.outbox.forget(uri);
    }

    /// A listen stream holds `uris` (within [`MAX_SUBSCRIPTIONS`] in all): those no other
    /// stream held, to subscribe to upstream.
    pub fn hold(&self, uris: &[String]) -> Vec<String> {
        let mut subscriptions = lock(&self.subscriptions);
        let mut first = Vec::new();
        for uri in uris {
            if let Some(holders) = subscriptions.get_mut(uri) {
                *holders += 1;
            } else if subscriptions.len() < MAX_SUBSCRIPTIONS {
                subscriptions.insert(uri.clone(), 1);
                first.push(uri.clone());
            }
        }
        first
    }

    /// A listen stream lets go of `uris`: those no stream holds any more, to unsubscribe from
    /// upstream.
    pub fn release(&self, uris: &[String]) -> Vec<String> {
        let mut subscriptions = lock(&self.subscriptions);
        let mut last = Vec::new();
        for uri in uris {
            if let Some(holders) = subscriptions.get_mut(uri) {
                *holders -= 1;
                if *holders == 0 {
                    subscriptions.remove(uri);
                    last.push(uri.clone());
                }
            }
        }
        last
    }

    /// Subscribes to (or unsubscribes from, `method`) each of `uris` at its upstream, those
    /// the composition offers; a failure is logged, never the caller's error (a listen stream
    /// stays open; a carried subscription is best effort). Returns the URIs the providers now
    /// follow (or no longer do): a subscription is carried once its provider answered — in
    /// 2026-07-28, once a listen stream naming it was acknowledged.
    pub async fn subscribe_upstream(&self, method: &str, uris: Vec<String>) -> Vec<String> {
        let served = self.served();
        // Together: a 2026-07-28 provider is then asked once for a stream naming them all,
        // not once per URI, each waiting for the last one's acknowledgement.
        let subscriptions = uris.into_iter().map(|uri| {
            let params = serde_json::json!({ "uri": uri });
            let composed = served.composed();
            async move { (composed.subscription(method, params).await, uri) }
        });
        let mut carried = Vec::new();
        for (answer, uri) in futures::future::join_all(subscriptions).await {
            match answer {
                Ok(_) => carried.push(uri),
                Err(
                    capstan_compose::composer::OfferingError::UnknownResource { .. }
                    | capstan_compose::composer::OfferingError::UnsafeUri { .. },
                ) => {}
                Err(error) => {
                    warn!(project = %self.identity.project, %uri, %error, "{method} at the provider failed");
                }
            }
        }
        carried
    }

    /// The URIs the task's client subscribed to.
    pub fn subscriptions(&self) -> BTreeSet<String> {
        lock(&self.subscriptions).keys().cloned().collect()
    }

    /// Tells the task's client of an update of each of `uris` it subscribed to: through the
    /// session's GET stream, and on every open listen stream that holds it.
    pub fn notify_resource_updated(&self, uris: BTreeSet<String>) {
        let subscribed: Vec<String> = {
            let subscriptions = lock(&self.subscriptions);
            uris.into_iter()
                .filter(|uri| subscriptions.contains_key(uri))
                .collect()
        };
        for uri in subscribed {
            self.tell(Change::Updated(uri));
        }
    }

    /// Tells the task's client that its prompts or its resources changed: on the session's
    /// GET stream, and on every open `subscriptions/listen` stream that asked for it.
    pub fn notify_offerings_changed(&self, prompts: bool, resources: bool) {
        if prompts {
            self.tell(Change::PromptList);
        }
        if resources {
            self.tell(Change::ResourceList);
        }
    }

    /// A stream of this task opens, if fewer than `max` are open: the guard counts it until
    /// dropped.
    pub fn open_stream(&self, max: usize) -> Result<OpenStream, Full> {
        let opened = self
            .streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            });
        match opened {
            Ok(_) => Ok(OpenStream(self.streams.clone())),
            Err(_) => Err(Full::Streams { max }),
        }
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.load(Ordering::Acquire)
    }

    /// Follows `listener` (an open `subscriptions/listen` stream, counted by the gate) until
    /// the returned guard is dropped. The stream does not make the task busy: how long an open
    /// stream keeps a task is the task registry's rule (`tasks.rs`), never forever.
    pub fn listen(&self, listener: Listener) -> Listening<'_> {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        lock(&self.listeners).push((id, listener));
        Listening { task: self, id }
    }

    fn forget_listener(&self, id: u64) {
        lock(&self.listeners).retain(|(kept, _)| *kept != id);
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
