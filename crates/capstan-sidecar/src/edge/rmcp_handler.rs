//! The rmcp adapter, for what rmcp's server still serves (`edge.rs`): `initialize`,
//! `server/discover` and `subscriptions/listen`. One `SessionHandler` per request (rmcp keeps
//! no session: the sidecar's sessions are its own, `tasks.rs`). `initialize` composes the
//! caller's project and starts the session's task, which the gate binds to the id it mints;
//! `server/discover` and a listen stream are served by the caller's task, for the caller it was
//! started for and nobody else. What the gate established reaches a handler as the one
//! `Checked` on the request.
//!
//! Protocol revisions: the session-based ones (2024-11-05 … 2025-11-25) over `initialize`, and
//! 2026-07-28 without a session: `server/discover` (with the caller's instructions), and
//! `subscriptions/listen` for `notifications/tools/list_changed`.

use std::borrow::Cow;
use std::sync::Arc;

use capstan_compose::{CallerRevision, ClientAsks};
use rmcp::model::{
    DiscoverResult, Implementation, InitializeRequestParams, InitializeResult, ProtocolVersion,
    ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::json;
use tracing::{Instrument as _, info};

use super::protocol::SUPPORTED_VERSIONS;
use super::request::Checked;
use crate::identity::Identity;
use crate::task::{ANOTHER_CALLER, MAX_SUBSCRIPTIONS, Task};
use crate::tasks::{Admitted, TaskStarter, Tasks};

use super::methods::skills;

/// The MCP handler of one session, or of one request without a session.
pub struct SessionHandler {
    tasks: Arc<Tasks>,
    starter: Arc<TaskStarter>,
}

impl SessionHandler {
    /// A handler for a new session, or for one request without a session (served by the
    /// caller's task in `tasks`); `starter` starts the tasks.
    pub fn new(tasks: Arc<Tasks>, starter: Arc<TaskStarter>) -> Self {
        Self { tasks, starter }
    }

    /// The task serving this request, for the caller it belongs to and nobody else: the
    /// session's (bound when its `initialize` answered; found by the gate), or — for a
    /// request of the 2026-07-28 revision — the caller's task without a session. The only way
    /// a handler method reaches a task, so every method checks the identity (the gate
    /// checked it too, before rmcp saw the request). rmcp's
    /// `StreamableHttpService` takes a `ServerHandler`, not a `Service`, so the check cannot
    /// wrap every method from outside.
    async fn task(&self, context: &RequestContext<RoleServer>) -> Result<Arc<Task>, McpError> {
        let checked = checked(context);
        let caller = checked.map(|checked| &checked.identity);
        if let Some(task) = checked.and_then(|checked| checked.session.as_ref()) {
            return if task.owned_by(caller) {
                Ok(task.clone())
            } else {
                Err(McpError::invalid_request(ANOTHER_CALLER, None))
            };
        }
        if !is_sessionless(context) {
            return Err(McpError::invalid_request(
                "the session is not initialized",
                None,
            ));
        }
        let Some(caller) = caller else {
            return Err(McpError::invalid_request(
                "no caller identity on the request (project header and token)",
                None,
            ));
        };
        // Resolved by the gate (which counted its streams); else — a request that did not
        // pass through it — looked up, or composed in the place the gate took.
        if let Some(task) = checked.and_then(|checked| checked.caller_task.as_ref())
            && task.owned_by(Some(caller))
        {
            return Ok(task.clone());
        }
        let offered = checked
            .and_then(|checked| checked.admitted.as_ref())
            .and_then(Admitted::take_place);
        self.tasks.caller_task(caller, offered, &self.starter).await
    }
}

/// Whether the request is of a revision without sessions (2026-07-28 on), by its own `_meta`.
fn is_sessionless(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// What the gate established about the request (`edge.rs`), on the HTTP request's parts rmcp
/// attached to it: rmcp's handlers see those parts and nothing else of the request.
fn checked(context: &RequestContext<RoleServer>) -> Option<&Checked> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Checked>())
}

/// The request's span (`request_span.rs`): what a handler does, in a task of rmcp's, joins it.
fn request_span_of(context: &RequestContext<RoleServer>) -> tracing::Span {
    checked(context).map_or_else(tracing::Span::none, |checked| checked.span.clone())
}

/// The caller the gate checked.
fn identity_of(context: &RequestContext<RoleServer>) -> Option<Identity> {
    checked(context).map(|checked| checked.identity.clone())
}

impl ServerHandler for SessionHandler {
    // `enable_logging` is deprecated in rmcp with the capability (SEP-2577); the session
    // revisions have it.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        // listChanged: a session's tools follow its bindings and upstreams (`refresh.rs`).
        // logging: `logging/setLevel` is passed to the providers, and their messages about a
        // call reach its caller (capstan-upstream `mcp/relay.rs`).
        // prompts, resources, completions: what the task's bindings select, forwarded to the
        // provider that offers it (`composer/offerings.rs` in capstan-compose); their list
        // changes and the updates of subscribed resources reach the session (`refresh.rs`).
        // skills: the bindings' skills through the MCP skills extension (`edge/methods/skills.rs`),
        // told to a caller only when its composition has one (`skills::declare`).
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_completions()
            .enable_skills()
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
        let span = request_span_of(&context);
        async {
            let Some(identity) = identity_of(&context) else {
                return Err(McpError::invalid_request(
                    "no caller identity on the request (project header and token)",
                    None,
                ));
            };
            if checked(&context).is_some_and(|checked| checked.session.is_some()) {
                return Err(McpError::invalid_request(
                    "the session is already initialized",
                    None,
                ));
            }
            let mut result = self.negotiate_initialize(&request)?;
            let asks = ClientAsks::from_capabilities(&json!(request.capabilities));
            let revision = CallerRevision::Sessions(asks);
            let project = self.starter.compose(&identity, revision).await;
            let instructions = &project.composed.composition.instructions;
            if !instructions.is_empty() {
                result.instructions = Some(instructions.clone());
            }
            skills::declare(&mut result.capabilities, &project.composed);
            let admitted = checked(&context).and_then(|checked| checked.admitted.as_ref());
            let task = self.starter.start(
                identity,
                project,
                admitted.and_then(Admitted::take_place),
                Some(asks),
            );
            if let Some(admitted) = admitted {
                admitted.started(&task);
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
            Ok(result)
        }
        .instrument(span)
        .await
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let span = request_span_of(&context);
        async {
            // The instructions are the caller's: discovering composes its task (reused by the
            // requests that follow).
            let task = self.task(&context).await?;
            let mut info = self.get_info();
            let served = task.served();
            let instructions = &served.composed().composition.instructions;
            if !instructions.is_empty() {
                info.instructions = Some(instructions.clone());
            }
            skills::declare(&mut info.capabilities, served.composed());
            Ok(DiscoverResult::from_server_info(
                self.supported_protocol_versions().into_owned(),
                info,
            ))
        }
        .instrument(span)
        .await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // List changes of tools, prompts and resources, and updates of the first
        // MAX_SUBSCRIPTIONS resources asked for. The acknowledgement goes out before the
        // caller's task is known, so a URI its composition does not offer is acknowledged and
        // hears nothing until a composition offers it (docs/mcp-surface.md).
        let uris = requested.resource_subscriptions.iter().flatten();
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .resource_subscriptions(uris.take(MAX_SUBSCRIPTIONS).cloned())
                .build(),
        )
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        // The stream was counted, and its place taken, by the gate.
        let task = self.task(subscription.request_context()).await?;
        let mut ended = task.ended();
        let _listening = task.listen(subscription.sink().clone());
        let uris = subscription
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let first = task.hold(&uris);
        // The stream was acknowledged before the provider followed these (rmcp acknowledges
        // before this handler runs): an update it sent in between was heard by no one, so each
        // is told once now, as "read it again" (docs/mcp-surface.md "Subscriptions").
        let carried = task.subscribe_upstream("resources/subscribe", first).await;
        task.notify_resource_updated(carried.into_iter().collect())
            .await;
        tokio::select! {
            () = subscription.cancelled() => {}
            // The task ended (time limit, shutdown): the stream closes gracefully.
            _ = ended.changed() => {}
        }
        let last = task.release(&uris);
        task.subscribe_upstream("resources/unsubscribe", last).await;
        Ok(())
    }
}
