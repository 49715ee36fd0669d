//! A task: one MCP session's composition and who it is for — its tools and their input
//! validators, the idle clock, the time limit, and the metering of its calls. The session's end
//! drops the task, which closes its upstream sessions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use capstan_api::validate::pointer_to_path;
use capstan_compose::{
    Composed, ComposedTool, Document, ErrorKind, MAX_INTENT_LEN, RoutedCapability, SkillError,
    Snapshot, ToolCallError, ToolError,
};
use capstan_platform::BaseTools;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, SubscriptionSink};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::admission::{Full, Place};
use crate::decisions::{DecisionLog, DecisionRecord};
use crate::identity::Identity;
use crate::metering::{Meter, ToolInvocation};
use crate::metrics::Metrics;
use crate::routing::{decide, no_eligible_provider};

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
}

/// A task: what the session serves now, and who it is for.
pub struct Task {
    context: TaskContext,
    identity: Identity,
    /// What the session serves; replaced whole when its composition changes (`refresh.rs`),
    /// while calls already running finish on the one they started with.
    served: RwLock<Arc<Served>>,
    max_duration: Option<Duration>,
    expired: AtomicBool,
    /// Milliseconds since `TaskContext::clock` at the session's last request.
    last_used: AtomicU64,
    /// Calls running now.
    busy: AtomicUsize,
    /// This session's place among the open sessions, released when the task ends.
    _permit: Option<Place>,
    /// Streams open now (a session's GET streams, `subscriptions/listen` streams).
    streams: Arc<AtomicUsize>,
    /// The session's MCP peer, through which `notifications/tools/list_changed` is sent.
    peer: OnceLock<Peer<RoleServer>>,
    /// The open `subscriptions/listen` streams of a task without a session (2026-07-28), each
    /// told of list changes; keyed so each stream removes its own when it ends.
    listeners: Mutex<Vec<(u64, SubscriptionSink)>>,
    next_listener: AtomicU64,
    /// Sent to when the task is shut down, dropped with it: those following it (`refresh.rs`,
    /// listen streams) stop.
    ended: tokio::sync::watch::Sender<()>,
}

/// One composition as a session serves it: the live composition and its tools, the platform
/// tools beside it, and the snapshot it came from (documents, and the qualifiers routed calls
/// obey).
pub struct Served {
    live: Arc<Live>,
    snapshot: Arc<Snapshot>,
}

/// A live composition, the tools `tools/list` shows and their input validators. Each of its
/// upstream sessions closes when the last composition holding it lets go (a call still running
/// on it finishes first; a composition made again keeps the sessions it shares).
struct Live {
    composed: Composed,
    /// The base platform tools, when the caller gets them (they act as the caller).
    base: Option<BaseTools>,
    tools: Vec<Tool>,
    validators: HashMap<String, jsonschema::Validator>,
}

impl Served {
    /// Builds what a session serves from `composed` (made from `snapshot`) and the platform
    /// tools `base`: the tools `tools/list` shows and a validator per input schema.
    pub fn new(composed: Composed, base: Option<BaseTools>, snapshot: Arc<Snapshot>) -> Self {
        let composition = &composed.composition;
        let mut tools: Vec<Tool> = composition
            .tools
            .iter()
            .map(|t| {
                let mut tool = Tool::new(
                    t.name.clone(),
                    t.description.clone().unwrap_or_default(),
                    t.input_schema.clone(),
                );
                tool.annotations = t.annotations.clone();
                tool
            })
            .collect();
        tools.extend(composed.capabilities().map(|c| c.tool.clone()));
        if !composition.skills.is_empty() {
            tools.push(load_skill_tool());
        }
        if let Some(base) = &base {
            tools.extend(base.tools().iter().cloned());
        }
        let mut validators = HashMap::new();
        let schemas = composition
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.input_schema.as_ref()))
            .chain(base.iter().flat_map(|base| {
                base.tools()
                    .iter()
                    .map(|t| (t.name.as_ref(), t.input_schema.as_ref()))
            }))
            // A routed call is checked against the capability's own schema once its routing
            // arguments are taken out.
            .chain(
                composed
                    .capabilities()
                    .map(|c| (c.tool.name.as_ref(), &c.spec.input_schema)),
            );
        for (name, schema) in schemas {
            match jsonschema::validator_for(&Value::Object(schema.clone())) {
                Ok(validator) => {
                    validators.insert(name.to_owned(), validator);
                }
                Err(error) => {
                    warn!(tool = %name, %error, "input schema not usable for checking; arguments pass unchecked")
                }
            }
        }
        Self {
            live: Arc::new(Live {
                composed,
                base,
                tools,
                validators,
            }),
            snapshot,
        }
    }

    /// The same composition, routing by the qualifiers of `snapshot` (whose documents are
    /// those this one was composed from).
    pub fn requalified(&self, snapshot: Arc<Snapshot>) -> Self {
        Self {
            live: self.live.clone(),
            snapshot,
        }
    }

    /// The live composition.
    pub fn composed(&self) -> &Composed {
        &self.live.composed
    }

    /// The base platform tools, when composed.
    pub fn base(&self) -> Option<&BaseTools> {
        self.live.base.as_ref()
    }

    /// The snapshot it was composed from (documents and qualifiers).
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The tools `tools/list` shows.
    pub fn tools(&self) -> &[Tool] {
        &self.live.tools
    }

    /// Checks `arguments` against the input schema of `tool`, if it has a usable one.
    fn validate(&self, tool: &str, arguments: &Value) -> Result<(), ToolError> {
        let Some(validator) = self.live.validators.get(tool) else {
            return Ok(());
        };
        let Some(error) = validator.iter_errors(arguments).next() else {
            return Ok(());
        };
        let field = pointer_to_path(arguments, error.instance_path().as_str());
        let shown = if field.is_empty() {
            "arguments"
        } else {
            field.as_str()
        };
        let error = ToolError::new(
            ErrorKind::InvalidInput,
            format!("{shown}: {error}; see the tool's input schema"),
        );
        Err(if field.is_empty() {
            error
        } else {
            error.at(field)
        })
    }
}

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

/// Counts a running call; the session is touched again when it ends (the identity middleware
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

fn load_skill_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": { "name": { "type": "string", "description": "The skill's name, as listed under Available skills." } },
        "required": ["name"],
        "additionalProperties": false
    });
    let mut tool = Tool::new(
        LOAD_SKILL,
        "Load the full procedure of one of the Available skills listed in your instructions.",
        Arc::new(schema.as_object().cloned().unwrap_or_default()),
    );
    tool.annotations = Some(ToolAnnotations::new().read_only(true));
    tool
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
            expired: AtomicBool::new(false),
            last_used: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            _permit: permit,
            streams: Arc::default(),
            peer: OnceLock::new(),
            listeners: Mutex::default(),
            next_listener: AtomicU64::new(0),
            ended: tokio::sync::watch::channel(()).0,
        });
        task.touch();
        if let Some(limit) = max_duration {
            let weak: Weak<Task> = Arc::downgrade(&task);
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                if let Some(task) = weak.upgrade() {
                    task.expired.store(true, Ordering::Release);
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

    /// Ends the upstream sessions of what the session serves (later calls to provider tools
    /// fail as unavailable), and tells those following the task that it has ended.
    pub fn shutdown(&self) {
        self.served().composed().shutdown();
        self.ended.send_replace(());
    }

    /// Whether the task's time limit has passed (its upstream sessions are closed).
    pub fn expired(&self) -> bool {
        self.expired.load(Ordering::Acquire)
    }

    /// Keeps the session's MCP peer, through which list changes are sent (once).
    pub fn set_peer(&self, peer: Peer<RoleServer>) {
        let _ = self.peer.set(peer);
    }

    /// Tells the task's client that its tools changed: through the session's peer, and on
    /// every open `subscriptions/listen` stream (a stream that is gone is dropped).
    pub async fn notify_tool_list_changed(&self) {
        if let Some(peer) = self.peer.get()
            && let Err(error) = peer.notify_tool_list_changed().await
        {
            warn!(project = %self.identity.project, %error, "notifications/tools/list_changed could not be sent");
        }
        let sinks: Vec<(u64, SubscriptionSink)> = match self.listeners.lock() {
            Ok(listeners) => listeners.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        for (id, sink) in sinks {
            if let Err(error) = sink.notify_tool_list_changed().await {
                debug!(project = %self.identity.project, %error, "a listen stream is gone");
                self.forget_listener(id);
            }
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

    /// Follows `sink` (an open `subscriptions/listen` stream, counted by the middleware) until
    /// the returned guard is dropped. The stream does not make the task busy: how long an open
    /// stream keeps a task is the task registry's rule (`tasks.rs`), never forever.
    pub fn listen(&self, sink: SubscriptionSink) -> Listening<'_> {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        match self.listeners.lock() {
            Ok(mut listeners) => listeners.push((id, sink)),
            Err(poisoned) => poisoned.into_inner().push((id, sink)),
        }
        Listening { task: self, id }
    }

    fn forget_listener(&self, id: u64) {
        let mut listeners = match self.listeners.lock() {
            Ok(listeners) => listeners,
            Err(poisoned) => poisoned.into_inner(),
        };
        listeners.retain(|(kept, _)| *kept != id);
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
    /// the middleware, the rmcp handler and a call each make.
    pub fn owned_by(&self, caller: Option<&Identity>) -> bool {
        caller.is_some_and(|caller| caller.fingerprint() == self.identity.fingerprint())
    }

    /// Serves one `tools/call` of this session, whichever path it arrived on (rmcp's session
    /// worker, or `direct.rs`): identity, the task's time limit, then a built-in or a
    /// provider tool. Errors a consumer can act on come back as tool results; only an unknown
    /// tool is a protocol error.
    pub async fn call(
        &self,
        caller: Option<&Identity>,
        request: CallToolRequestParams,
    ) -> Result<CallToolResult, McpError> {
        let _busy = Busy::new(self);
        if !self.owned_by(caller) {
            return Ok(ToolError::new(ErrorKind::Forbidden, ANOTHER_CALLER).into_result());
        }
        if self.expired.load(Ordering::Acquire) {
            let limit = self.max_duration.unwrap_or_default();
            return Ok(ToolError::new(
                ErrorKind::Rejected,
                format!(
                    "this task's time limit ({}s, the smallest maxTaskDurationSeconds of its \
                     bindings) has passed; start a new session",
                    limit.as_secs()
                ),
            )
            .into_result());
        }
        let CallToolRequestParams {
            name, arguments, ..
        } = request;
        // The call runs on what the session serves as it starts, to its end.
        let served = self.served();
        let composed = served.composed();
        if name == LOAD_SKILL && !composed.composition.skills.is_empty() {
            let arguments = Value::Object(arguments.unwrap_or_default());
            return Ok(load_skill(composed, &arguments)
                .await
                .unwrap_or_else(ToolError::into_result));
        }
        if let Some(base) = served.base()
            && base.has(&name)
        {
            return Ok(self.call_base_tool(&served, base, &name, arguments).await);
        }
        if let Some(routed) = composed.capability(&name) {
            return Ok(self.call_capability(&served, routed, arguments).await);
        }
        self.call_provider_tool(&served, &name, arguments).await
    }

    /// A routed call: take out the routing arguments, check the rest against the capability's
    /// schema, decide (recorded whatever the outcome), and forward to the chosen provider.
    async fn call_capability(
        &self,
        served: &Served,
        routed: &RoutedCapability,
        arguments: Option<JsonObject>,
    ) -> CallToolResult {
        let capability = routed.spec.capability_id.as_str();
        let mut arguments = arguments.unwrap_or_default();
        let taken = match capstan_route::take_from(&mut arguments) {
            Ok(taken) => taken,
            Err(errors) => {
                let message: Vec<String> = errors.iter().map(ToString::to_string).collect();
                self.context
                    .metrics
                    .tool_call(ErrorKind::InvalidInput.as_str());
                return ToolError::new(ErrorKind::InvalidInput, message.join("; "))
                    .at(errors[0].path.clone())
                    .into_result();
            }
        };
        if let Some(intent) = &taken.intent
            && intent.chars().count() as u64 > MAX_INTENT_LEN
        {
            self.context
                .metrics
                .tool_call(ErrorKind::InvalidInput.as_str());
            return ToolError::new(
                ErrorKind::InvalidInput,
                format!("intent: at most {MAX_INTENT_LEN} characters"),
            )
            .at("intent")
            .into_result();
        }
        let arguments = Value::Object(arguments);
        if let Err(error) = served.validate(&routed.tool.name, &arguments) {
            self.context.metrics.tool_call(error.kind.as_str());
            return error.into_result();
        }
        let digest = taken
            .intent
            .as_deref()
            .map(|intent| self.context.decisions.intent_digest(intent));
        let project = &self.identity.project;
        let decision = match decide(routed, served.snapshot(), &taken.route, &taken.requirements) {
            Ok(decision) => decision,
            Err(why) => {
                warn!(capability, %why, "routed call refused");
                self.context
                    .metrics
                    .route_decision(capability, "refused", &[]);
                self.context.metrics.tool_call(ErrorKind::Rejected.as_str());
                self.context.decisions.record(DecisionRecord::refused(
                    project,
                    capability,
                    why.clone(),
                    digest,
                ));
                return ToolError::new(ErrorKind::Rejected, why)
                    .with_code("route_refused")
                    .into_result();
            }
        };
        let exclusions: Vec<&str> = decision
            .exclusions
            .iter()
            .map(|e| e.reason.as_str())
            .collect();
        let reason = decision
            .route_reason
            .map_or("no_eligible_provider", route_reason_label);
        self.context
            .metrics
            .route_decision(capability, reason, &exclusions);
        info!(
            capability,
            selected = decision.selected().map(|c| c.tool.as_str()),
            route_reason = reason,
            eligible = decision.eligible(),
            excluded = decision.exclusions.len(),
            intent_digest = digest.as_deref(),
            "routed call decided"
        );
        self.context
            .decisions
            .record(DecisionRecord::of(project, &decision, digest));
        let Some(tool) = decision
            .selected()
            .and_then(|winner| served.composed().tool(&winner.tool))
        else {
            self.context.metrics.tool_call(ErrorKind::Rejected.as_str());
            return ToolError::new(ErrorKind::Rejected, no_eligible_provider(&decision))
                .with_code("no_eligible_provider")
                .into_result();
        };
        self.forward(served, tool, arguments, Some(capability))
            .await
    }

    /// A base platform tool: acts as the caller on the project's control plane. Not metered
    /// (no provider did the work); counted and traced like every call.
    async fn call_base_tool(
        &self,
        served: &Served,
        base: &BaseTools,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> CallToolResult {
        let mutating = base.mutating().iter().any(|m| m == name);
        let span = info_span!(
            "tool_call",
            tool.name = %name,
            tool.mutating = mutating,
            service.name = "capstan",
            outcome = tracing::field::Empty,
        );
        let arguments = Value::Object(arguments.unwrap_or_default());
        let result = match served.validate(name, &arguments) {
            Err(error) => Err(error),
            Ok(()) => base.call(name, &arguments).instrument(span.clone()).await,
        };
        let outcome = match &result {
            Ok(_) => "ok",
            Err(error) => error.kind.as_str(),
        };
        span.record("outcome", outcome);
        self.context.metrics.tool_call(outcome);
        result.unwrap_or_else(ToolError::into_result)
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

    async fn call_provider_tool(
        &self,
        served: &Served,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, McpError> {
        let Some(tool) = served.composed().tool(name) else {
            return Err(McpError::invalid_params(
                format!(
                    "no tool named {name:?} is available to this assistant; tools/list shows the ones that are"
                ),
                None,
            ));
        };
        let arguments = Value::Object(arguments.unwrap_or_default());
        if let Err(error) = served.validate(name, &arguments) {
            self.context.metrics.tool_call(error.kind.as_str());
            self.meter(tool, error.kind.as_str(), Instant::now(), None);
            return Ok(error.into_result());
        }
        Ok(self.forward(served, tool, arguments, None).await)
    }

    /// Calls provider `tool` with `arguments` (already checked), counted, traced and metered;
    /// `capability` names the routed capability the call serves, if any.
    async fn forward(
        &self,
        served: &Served,
        tool: &ComposedTool,
        arguments: Value,
        capability: Option<&str>,
    ) -> CallToolResult {
        let span = info_span!(
            "tool_call",
            tool.name = %tool.name,
            tool.mutating = tool.mutating,
            service.name = %tool.service_name,
            capability = capability,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let result = match served
            .composed()
            .call_tool(&tool.name, arguments)
            .instrument(span.clone())
            .await
        {
            Ok(result) => Ok(result),
            Err(ToolCallError::Upstream(error)) => Err(ToolError::from(error)),
            Err(error @ ToolCallError::Unknown { .. }) => {
                Err(ToolError::new(ErrorKind::Forbidden, error.to_string()))
            }
        };
        let outcome = match &result {
            Ok(r) if r.is_error == Some(true) => "tool_error",
            Ok(_) => "ok",
            Err(error) => error.kind.as_str(),
        };
        span.record("outcome", outcome);
        self.context.metrics.tool_call(outcome);
        self.meter(tool, outcome, started, capability);
        result.unwrap_or_else(ToolError::into_result)
    }

    fn meter(
        &self,
        tool: &ComposedTool,
        outcome: &str,
        started: Instant,
        capability: Option<&str>,
    ) {
        self.context.meter.record(&ToolInvocation {
            time: k8s_openapi::jiff::Timestamp::now().to_string(),
            project: &self.identity.project,
            service: &tool.service_name,
            binding: &tool.binding,
            tool: &tool.name,
            capability,
            outcome,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        });
    }
}

/// `load_skill`: the named skill's body, framed with its provenance.
async fn load_skill(composed: &Composed, arguments: &Value) -> Result<CallToolResult, ToolError> {
    let Some(name) = arguments.get("name").and_then(Value::as_str) else {
        let mut error = ToolError::new(ErrorKind::InvalidInput, "name: required (a string)");
        error.field = Some("name".into());
        return Err(error);
    };
    match composed.load_skill(name).await {
        Ok(body) => Ok(CallToolResult::success(vec![ContentBlock::text(body)])),
        Err(error @ SkillError::Unknown { .. }) => {
            let mut error = ToolError::new(ErrorKind::InvalidInput, error.to_string());
            error.field = Some("name".into());
            Err(error)
        }
        Err(error @ SkillError::Fetch { .. }) => Err(ToolError::new(
            ErrorKind::UpstreamUnavailable,
            error.to_string(),
        )),
    }
}

/// A route reason as metrics and logs spell it.
fn route_reason_label(reason: capstan_route::RouteReason) -> &'static str {
    use capstan_route::RouteReason as R;
    match reason {
        R::PinnedByRequest => "pinned_by_request",
        R::PinnedByPolicy => "pinned_by_policy",
        R::OnlyCandidate => "only_candidate",
        R::BestScore => "best_score",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_load_skill_schema_should_take_only_a_name() {
        let tool = load_skill_tool();
        assert_eq!(tool.input_schema["required"], json!(["name"]));
        assert!(tool.input_schema["properties"].get("project").is_none());
    }
}
