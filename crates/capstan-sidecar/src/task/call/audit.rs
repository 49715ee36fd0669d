//! A call's audit line (docs/audit.md): `Task::call` runs the call, noting what it decided on
//! its way (`CallNote`), and writes one line whatever the outcome — refusals too — naming the
//! caller as its project's plane authenticated them. The request's span carries the same
//! decisions (never the name).

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use capstan_upstream::mcp::CallerSide;
use k8s_openapi::jiff::Timestamp;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolRequestParams, CallToolResponse};

use super::super::Task;
use super::UNKNOWN_TOOL;
use crate::caller::identity::Identity;
use crate::observe::audit::{AuditEvent, Authorization, Named, arguments_digest};
use crate::observe::request_span;

/// What a call decided on its way, for its audit line.
#[derive(Default)]
pub(super) struct CallNote {
    noted: Mutex<Noted>,
}

#[derive(Default)]
struct Noted {
    authorization: Option<Authorization>,
    /// `passed`, or the limit that refused the call; none until a server's limits are asked.
    limit: Option<&'static str>,
    /// The provider tool the call was let through to.
    provider: Option<String>,
}

impl CallNote {
    /// What authorization decided.
    pub(super) fn authorized(&self, authorization: Authorization) {
        self.with(|noted| noted.authorization = Some(authorization));
    }

    /// The call passed the limits of `tool`'s server (`gated`: some limit applied) and goes
    /// to it.
    pub(super) fn passed(&self, tool: &str, gated: bool) {
        self.with(|noted| {
            noted.limit = Some(if gated { "passed" } else { "none" });
            noted.provider = Some(tool.to_owned());
        });
    }

    /// `limit` of a provider's server refused the call (a routed call may still pass to the
    /// next provider, which then notes `passed`).
    pub(super) fn limited(&self, limit: &'static str) {
        self.with(|noted| noted.limit = Some(limit));
    }

    fn with(&self, change: impl FnOnce(&mut Noted)) {
        change(&mut self.noted.lock().unwrap_or_else(PoisonError::into_inner));
    }

    fn take(&self) -> Noted {
        std::mem::take(&mut self.noted.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Task {
    /// Serves one `tools/call` of this task (`call.rs`), and writes its audit line.
    pub async fn call(
        &self,
        caller: Option<&Identity>,
        request: CallToolRequestParams,
        caller_side: Option<CallerSide>,
    ) -> Result<CallToolResponse, McpError> {
        if !self.context.audit.is_on() {
            let note = CallNote::default();
            let answered = self.call_noted(caller, request, caller_side, &note).await;
            record_on_span(&note.take());
            return answered;
        }
        let started = Instant::now();
        let tool = request.name.to_string();
        let digest = arguments_digest(request.arguments.as_ref());
        let note = CallNote::default();
        // The caller's name is asked beside the call, once per task, so a first call does
        // not wait for the plane's answer after its own; boxed, so that the call's future does
        // not carry the question's kilobytes (docs/performance.md "A request's future, once").
        let (answered, named) = tokio::join!(
            self.call_noted(caller, request, caller_side, &note),
            Box::pin(self.named())
        );
        let noted = note.take();
        record_on_span(&noted);
        let another = noted.authorization == Some(Authorization::AnotherCaller);
        self.context.audit.record(
            AuditEvent {
                time: Timestamp::now(),
                project: &self.identity.project,
                user: None,
                uid: None,
                user_digest: None,
                unnamed: None,
                tool: &tool,
                arguments_digest: &digest,
                authorization: noted.authorization,
                limit: noted.limit.unwrap_or("none"),
                provider_tool: noted.provider.as_deref(),
                outcome: &outcome(&answered),
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            },
            // A request on another caller's session is not that caller's call.
            named.filter(|_| !another),
        );
        answered
    }

    /// Who the task's caller is by name, asked once; none when audit lines name nobody.
    async fn named(&self) -> Option<&Named> {
        if !self.context.audit.wants_names() {
            return None;
        }
        Some(
            self.named
                .get_or_init(|| self.context.names.of(&self.identity))
                .await,
        )
    }
}

/// The call's decisions on the request's span.
fn record_on_span(noted: &Noted) {
    if let Some(authorization) = noted.authorization {
        request_span::decided(authorization.as_str(), noted.limit.unwrap_or("none"));
    }
}

/// The outcome word of what the caller was answered.
fn outcome(answered: &Result<CallToolResponse, McpError>) -> String {
    match answered {
        Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => result
            .structured_content
            .as_ref()
            .and_then(|c| c["error"]["kind"].as_str())
            .unwrap_or("tool_error")
            .to_owned(),
        Ok(CallToolResponse::Complete(_)) => "ok".to_owned(),
        Ok(_) => "input_required".to_owned(),
        // The one refusal of a tool the caller cannot call (`call.rs` `unknown_tool`).
        Err(error) if error.message.starts_with(UNKNOWN_TOOL) => "unknown_tool".to_owned(),
        Err(_) => "protocol_error".to_owned(),
    }
}
