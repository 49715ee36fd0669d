//! One MCP session is one task: `initialize` binds the caller's project and token, composes,
//! and opens the upstreams; the session's end (DELETE, idle timeout) closes them; the smallest
//! `maxTaskDurationSeconds` of the composed documents ends the task early.
//!
//! Protocol revisions: only the session-based ones (up to 2025-11-25). The 2026-07-28 revision
//! has no sessions and no `initialize`, so a check bound at `initialize` would not hold for
//! it; supporting it would mean composing per request, keyed by (project, caller), with a
//! short TTL — a larger change than the current clients need, since they fall back to
//! `initialize` when the server does not offer 2026-07-28.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use capstan_api::validate::pointer_to_path;
use capstan_compose::compose::{SkillError, ToolCallError};
use capstan_compose::{Composed, Document};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tracing::{Instrument, info, info_span, warn};

use crate::identity::{Identity, SessionPermit};
use crate::metering::ToolInvocation;
use crate::sidecar::Sidecar;
use crate::tool_error::{ErrorKind, ToolError};

/// The built-in that fetches a skill's body.
pub const LOAD_SKILL: &str = "load_skill";

/// The protocol revisions served: every session-based one.
pub const SUPPORTED_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2024_11_05,
];

/// A task: what `initialize` composed, and who it is for.
pub struct Task {
    sidecar: Arc<Sidecar>,
    identity: Identity,
    composed: Composed,
    tools: Vec<Tool>,
    validators: HashMap<String, jsonschema::Validator>,
    max_duration: Option<Duration>,
    expired: AtomicBool,
    /// Milliseconds since `Sidecar::clock` at the session's last request.
    last_used: AtomicU64,
    /// Calls running now.
    busy: AtomicUsize,
    /// This session's place among the open sessions, released when the task ends.
    _permit: Option<SessionPermit>,
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

/// Passed between the identity middleware and `initialize`: the middleware offers the
/// session's permit (its place among the open sessions), `initialize` keeps it in the task it
/// creates and leaves the task here for the middleware to bind to the session id rmcp answers
/// with.
#[derive(Clone, Default)]
pub struct TaskSlot(Arc<SlotInner>);

#[derive(Default)]
struct SlotInner {
    task: std::sync::OnceLock<Weak<Task>>,
    permit: std::sync::Mutex<Option<SessionPermit>>,
}

impl TaskSlot {
    /// Offers the permit the new session's task will hold.
    pub fn offer(&self, permit: SessionPermit) {
        if let Ok(mut slot) = self.0.permit.lock() {
            *slot = Some(permit);
        }
    }

    /// The task `initialize` created, if it created one.
    pub fn task(&self) -> Weak<Task> {
        self.0.task.get().cloned().unwrap_or_default()
    }

    fn take_permit(&self) -> Option<SessionPermit> {
        self.0.permit.lock().ok().and_then(|mut p| p.take())
    }

    fn set_task(&self, task: &Arc<Task>) {
        let _ = self.0.task.set(Arc::downgrade(task));
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // The session ended (DELETE or idle timeout): close its upstream sessions.
        self.composed.shutdown();
        self.sidecar.sessions.forget(self.identity.nonce);
        self.sidecar.metrics.sessions_active.dec();
        info!(project = %self.identity.project, "session ended; upstreams closed");
    }
}

/// The MCP handler of one session.
pub struct SessionHandler {
    sidecar: Arc<Sidecar>,
    task: OnceCell<Arc<Task>>,
}

impl SessionHandler {
    /// A handler for a new session.
    pub fn new(sidecar: Arc<Sidecar>) -> Self {
        Self {
            sidecar,
            task: OnceCell::new(),
        }
    }

    /// The session's task, for the caller it is bound to and nobody else: the only way a
    /// handler method reaches the task, so every method that serves the session checks the
    /// identity (the identity middleware checked it too, before rmcp saw the request).
    fn task(&self, context: &RequestContext<RoleServer>) -> Result<&Arc<Task>, McpError> {
        let task = self
            .task
            .get()
            .ok_or_else(|| McpError::invalid_request("the session is not initialized", None))?;
        match identity_of(context) {
            Some(caller) if caller.fingerprint() == task.identity.fingerprint() => Ok(task),
            _ => Err(McpError::invalid_request(
                "this session belongs to another project or caller: the project and token must \
                 be the ones sent with `initialize`",
                None,
            )),
        }
    }
}

/// The identity the identity middleware attached to the HTTP request.
fn identity_of(context: &RequestContext<RoleServer>) -> Option<Identity> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Identity>())
        .cloned()
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
        if caller.is_none_or(|caller| caller.fingerprint() != self.identity.fingerprint()) {
            return Ok(ToolError::new(
                ErrorKind::Forbidden,
                "this session belongs to another project or caller",
            )
            .into_result());
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
        if name == LOAD_SKILL && !self.composed.composition.skills.is_empty() {
            let arguments = Value::Object(arguments.unwrap_or_default());
            return Ok(self
                .load_skill(&arguments)
                .await
                .unwrap_or_else(ToolError::into_result));
        }
        self.call_provider_tool(&name, arguments).await
    }

    /// What `initialize` composed for this task.
    pub fn composed(&self) -> &Composed {
        &self.composed
    }

    /// Marks the session as used now (the idle timeout counts from the last request).
    pub fn touch(&self) {
        let now = self.sidecar.clock.elapsed().as_millis();
        self.last_used
            .store(u64::try_from(now).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// How long the session has been idle: zero while a call runs, else the time since its
    /// last request or call.
    pub fn idle(&self) -> Duration {
        if self.busy.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let now = self.sidecar.clock.elapsed().as_millis();
        let now = u64::try_from(now).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(self.last_used.load(Ordering::Relaxed)))
    }

    fn validate(&self, tool: &str, arguments: &Value) -> Result<(), ToolError> {
        let Some(validator) = self.validators.get(tool) else {
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
        Err(ToolError {
            kind: ErrorKind::InvalidInput,
            message: format!("{shown}: {error}; see the tool's input schema"),
            field: (!field.is_empty()).then_some(field),
        })
    }

    async fn load_skill(&self, arguments: &Value) -> Result<CallToolResult, ToolError> {
        let Some(name) = arguments.get("name").and_then(Value::as_str) else {
            let mut error = ToolError::new(ErrorKind::InvalidInput, "name: required (a string)");
            error.field = Some("name".into());
            return Err(error);
        };
        match self.composed.load_skill(name).await {
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

    async fn call_provider_tool(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, McpError> {
        let Some(tool) = self.composed.tool(name) else {
            return Err(McpError::invalid_params(
                format!(
                    "no tool named {name:?} is available to this assistant; tools/list shows the ones that are"
                ),
                None,
            ));
        };
        let span = info_span!(
            "tool_call",
            tool.name = %name,
            tool.mutating = tool.mutating,
            service.name = %tool.service_name,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let arguments = Value::Object(arguments.unwrap_or_default());
        let result = match self.validate(name, &arguments) {
            Err(error) => Err(error),
            Ok(()) => match self
                .composed
                .call_tool(
                    name,
                    match arguments {
                        Value::Object(map) => Some(map),
                        _ => None,
                    },
                )
                .instrument(span.clone())
                .await
            {
                Ok(result) => Ok(result),
                Err(ToolCallError::Upstream(error)) => Err(ToolError::from(error)),
                Err(error @ ToolCallError::Unknown { .. }) => {
                    Err(ToolError::new(ErrorKind::Forbidden, error.to_string()))
                }
            },
        };
        let outcome = match &result {
            Ok(r) if r.is_error == Some(true) => "tool_error",
            Ok(_) => "ok",
            Err(error) => error.kind.as_str(),
        };
        span.record("outcome", outcome);
        self.sidecar.metrics.tool_call(outcome);
        self.sidecar.meter.record(&ToolInvocation {
            time: k8s_openapi::jiff::Timestamp::now().to_string(),
            project: &self.identity.project,
            service: &tool.service_name,
            binding: &tool.binding,
            tool: name,
            outcome,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        });
        Ok(result.unwrap_or_else(ToolError::into_result))
    }
}

impl ServerHandler for SessionHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("capstan-sidecar", env!("CARGO_PKG_VERSION")),
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(SUPPORTED_VERSIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let Some(identity) = identity_of(&context) else {
            return Err(McpError::invalid_request(
                "no caller identity on the request (project header and token)",
                None,
            ));
        };
        if self.task.get().is_some() {
            return Err(McpError::invalid_request(
                "the session is already initialized",
                None,
            ));
        }
        let mut result = self.negotiate_initialize(&request)?;
        context.peer.set_peer_info(request);
        let composed = self.sidecar.compose(&identity).await;
        let composition = &composed.composed.composition;
        let mut tools: Vec<Tool> = composition
            .tools
            .iter()
            .map(|t| {
                let mut tool = Tool::new(
                    t.name.clone(),
                    t.description.clone().unwrap_or_default(),
                    Arc::new(t.input_schema.clone()),
                );
                tool.annotations = t.annotations.clone();
                tool
            })
            .collect();
        if !composition.skills.is_empty() {
            tools.push(load_skill_tool());
        }
        let mut validators = HashMap::new();
        for tool in &composition.tools {
            match jsonschema::validator_for(&Value::Object(tool.input_schema.clone())) {
                Ok(validator) => {
                    validators.insert(tool.name.clone(), validator);
                }
                Err(error) => {
                    warn!(tool = %tool.name, %error, "input schema not usable for checking; arguments pass unchecked")
                }
            }
        }
        if !composition.instructions.is_empty() {
            result.instructions = Some(composition.instructions.clone());
        }
        let max_duration = max_task_duration(&composed.documents);
        let slot = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<TaskSlot>());
        let task = Arc::new(Task {
            sidecar: self.sidecar.clone(),
            identity: identity.clone(),
            composed: composed.composed,
            tools,
            validators,
            max_duration,
            expired: AtomicBool::new(false),
            last_used: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            _permit: slot.and_then(TaskSlot::take_permit),
        });
        task.touch();
        if let Some(slot) = slot {
            slot.set_task(&task);
        }
        self.sidecar.metrics.sessions_active.inc();
        self.sidecar.metrics.sessions_total.inc();
        if let Some(limit) = max_duration {
            let weak: Weak<Task> = Arc::downgrade(&task);
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                if let Some(task) = weak.upgrade() {
                    task.expired.store(true, Ordering::Release);
                    task.composed.shutdown();
                    info!(project = %task.identity.project, ?limit, "task time limit reached; upstreams closed");
                }
            });
        }
        info!(
            project = %identity.project,
            tools = task.tools.len(),
            degraded = composition_degraded(&task.composed),
            "session initialized"
        );
        let _ = self.task.set(task);
        Ok(result)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let task = self.task(&context)?;
        Ok(ListToolsResult::with_all_items(task.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let task = self.task(&context)?;
        task.call(identity_of(&context).as_ref(), request)
            .await
            .map(CallToolResponse::Complete)
    }
}

fn composition_degraded(composed: &Composed) -> usize {
    composed
        .composition
        .bindings
        .iter()
        .filter(|b| b.degraded())
        .count()
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
