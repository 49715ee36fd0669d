//! The rmcp adapter: one `SessionHandler` per MCP session. `initialize` composes the caller's
//! project and starts the session's task; `tools/list` and `tools/call` serve from it, for the
//! caller it was started for and nobody else.
//!
//! Protocol revisions: only the session-based ones (up to 2025-11-25). The 2026-07-28 revision
//! has no sessions and no `initialize`, so a check bound at `initialize` would not hold for
//! it; supporting it means composing per request, keyed by (project, caller), with a short
//! TTL — a later issue; clients fall back to `initialize` when the server does not offer
//! 2026-07-28.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::OnceCell;
use tracing::info;

use crate::compose::ProjectComposer;
use crate::feeds::ProjectFeeds;
use crate::identity::Identity;
use crate::refresh;
use crate::sessions::TaskSlot;
use crate::task::{Served, Task};

/// The protocol revisions served: every session-based one.
pub const SUPPORTED_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2024_11_05,
];

/// The MCP handler of one session.
pub struct SessionHandler {
    composer: Arc<ProjectComposer>,
    feeds: Arc<ProjectFeeds>,
    task: OnceCell<Arc<Task>>,
}

impl SessionHandler {
    /// A handler for a new session; its task follows its project's documents on `feeds`.
    pub fn new(composer: Arc<ProjectComposer>, feeds: Arc<ProjectFeeds>) -> Self {
        Self {
            composer,
            feeds,
            task: OnceCell::new(),
        }
    }

    /// The session's task, for the caller it is bound to and nobody else: the only way a
    /// handler method reaches the task, so every method that serves the session checks the
    /// identity (the identity middleware checked it too, before rmcp saw the request). rmcp's
    /// `StreamableHttpService` takes a `ServerHandler`, not a `Service`, so the check cannot
    /// wrap every method from outside.
    fn task(&self, context: &RequestContext<RoleServer>) -> Result<&Arc<Task>, McpError> {
        let task = self
            .task
            .get()
            .ok_or_else(|| McpError::invalid_request("the session is not initialized", None))?;
        match identity_of(context) {
            Some(caller) if caller.fingerprint() == task.identity().fingerprint() => Ok(task),
            _ => Err(McpError::invalid_request(
                "this session belongs to another project or caller: the project and token must \
                 be the ones sent with `initialize`",
                None,
            )),
        }
    }
}

/// The HTTP request parts rmcp attached to a request.
fn parts(context: &RequestContext<RoleServer>) -> Option<&axum::http::request::Parts> {
    context.extensions.get::<axum::http::request::Parts>()
}

/// The identity the identity middleware attached to the HTTP request.
fn identity_of(context: &RequestContext<RoleServer>) -> Option<Identity> {
    parts(context)
        .and_then(|parts| parts.extensions.get::<Identity>())
        .cloned()
}

impl ServerHandler for SessionHandler {
    fn get_info(&self) -> ServerConfig {
        // listChanged: a session's tools follow its bindings and upstreams (`refresh.rs`).
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            "capstan-sidecar",
            env!("CARGO_PKG_VERSION"),
        ))
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
        let project = self.composer.compose(&identity).await;
        let instructions = &project.composed.composition.instructions;
        if !instructions.is_empty() {
            result.instructions = Some(instructions.clone());
        }
        let slot = parts(&context).and_then(|parts| parts.extensions.get::<TaskSlot>());
        let task = Task::start(
            self.composer.context().clone(),
            identity,
            Served::new(project.composed, project.snapshot),
            slot.and_then(TaskSlot::take_permit),
        );
        task.set_peer(context.peer.clone());
        refresh::follow(&task, self.composer.clone(), &self.feeds);
        if let Some(slot) = slot {
            slot.set_task(&task);
        }
        let degraded = task
            .served()
            .composed()
            .composition
            .bindings
            .iter()
            .filter(|b| b.degraded())
            .count();
        info!(
            project = %task.identity().project,
            tools = task.served().tools().len(),
            degraded,
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
        Ok(ListToolsResult::with_all_items(
            task.served().tools().to_vec(),
        ))
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
