//! How a task answers a `tools/call` (`edge/tools_call.rs`, in a session or without one): the
//! caller and the time limit, then a built-in, a base platform tool, a routed
//! capability or a provider tool. Every call is counted once under its outcome
//! (`Task::refuse` for every refusal); calls that reach a provider are traced and metered.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use capstan_compose::capabilities::RoutedCapability;
use capstan_compose::composer::Composed;
use capstan_compose::composer::SkillError;
use capstan_core::tool_error::{ErrorKind, ToolError};
use capstan_platform::BaseTools;
use capstan_upstream::mcp::CallTraffic;
use capstan_upstream::mcp::CallerSide;
use capstan_upstream::trace_context::span_unless_unsampled;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
};
use serde_json::Value;
use tracing::field::Empty;
use tracing::{Instrument, debug_span};

mod audit;
mod provider;
mod routed;

use self::audit::CallNote;
use super::gap_report::{self, REPORT_GAP, report_gap};
use super::search::{FIND_TOOLS, find_tools};
use super::{ANOTHER_CALLER, Busy, LOAD_SKILL, Served, Task};
use crate::caller::authorization::Withheld;
use crate::caller::identity::Identity;
use crate::observe::audit::Authorization;
use crate::observe::request_span;

impl Task {
    /// Serves one `tools/call` of this task: identity, the task's time limit, then a built-in,
    /// a base tool, a routed capability or a provider tool. Errors a consumer can act on come
    /// back as tool results; only an unknown tool is a protocol error. A call that reaches a
    /// provider carries the caller's `_meta`, and the provider's progress, log messages and
    /// questions about it go to `caller_side` (the caller's stream; capstan-upstream
    /// `mcp/relay.rs`). A 2026-07-28 provider's `input_required` result reaches a 2026-07-28
    /// caller as it is, and its retry (`inputResponses`, `requestState`) the same provider.
    ///
    /// What the call decided on its way is noted in `note`, for its audit line (`audit.rs`).
    async fn call_noted(
        &self,
        caller: Option<&Identity>,
        request: CallToolRequestParams,
        caller_side: Option<CallerSide>,
        note: &CallNote,
    ) -> Result<CallToolResponse, McpError> {
        let _busy = Busy::new(self);
        if !self.owned_by(caller) {
            note.authorized(Authorization::AnotherCaller);
            let error = ToolError::new(ErrorKind::Forbidden, ANOTHER_CALLER);
            return Ok(self.refuse(error).into());
        }
        if self.expired() {
            return Ok(self.refuse(self.time_limit(false)).into());
        }
        let CallToolRequestParams {
            name,
            arguments,
            meta,
            input_responses,
            request_state,
            ..
        } = request;
        // A retry answering a provider's question: the state Capstan sealed with the question
        // says who asked (`task/request_states.rs`); one that does not verify reaches no provider.
        let asked = match request_state.as_deref() {
            Some(sealed) => match self.open_state("tools/call", &name, sealed) {
                Ok(asked) => Some(asked),
                Err(error) => return Err(error),
            },
            None => None,
        };
        let provider_state = asked.as_ref().and_then(|a| a.state.clone());
        let traffic = CallTraffic::new(meta, caller_side, self.client_asks())
            .retrying(input_responses, provider_state);
        // The call runs on what the session serves as it starts, to its end.
        let served = self.served();
        let withheld = match self.authorize(&served, &name, note).await {
            Ok(withheld) => withheld,
            Err(refused) => return refused,
        };
        let composed = served.composed();
        match self.built_in(&served, &withheld, &name, &arguments).await {
            Some(Ok(result)) => {
                self.context.metrics.tool_call("ok");
                return Ok(result.into());
            }
            Some(Err(error)) => return Ok(self.refuse(error).into()),
            None => {}
        }
        if let Some(base) = served.base()
            && base.has(&name)
        {
            // Boxed: a base tool's future (a plane's reads and writes) is kilobytes that every
            // provider call would otherwise carry and copy (docs/performance.md "A request's
            // future, once").
            let result = Box::pin(self.call_base_tool(&served, base, &name, arguments)).await;
            return Ok(result.into());
        }
        if let Some(routed) = composed.capability(&name) {
            let routed = usable_candidates(routed, &withheld);
            return self
                .call_capability(&served, &routed, arguments, traffic, asked, note)
                .await;
        }
        self.call_provider_tool(&served, &name, arguments, traffic, note)
            .await
    }

    /// A call of a built-in tool the session offers (`load_skill`, `find_tools`,
    /// `report_capability_gap`): its result or refusal; `None` for any other name.
    async fn built_in(
        &self,
        served: &Served,
        withheld: &Withheld,
        name: &str,
        arguments: &Option<JsonObject>,
    ) -> Option<Result<CallToolResult, ToolError>> {
        let arguments = || Value::Object(arguments.clone().unwrap_or_default());
        let composed = served.composed();
        if name == LOAD_SKILL && !composed.composition.skills.is_empty() {
            return Some(load_skill(composed, &arguments()).await);
        }
        if name == REPORT_GAP && gap_report::offered(served, &self.context.gaps) {
            let gaps = &self.context.gaps;
            return Some(report_gap(
                served,
                withheld,
                &self.identity,
                gaps,
                &arguments(),
            ));
        }
        if name == FIND_TOOLS && self.context.search.offered(served, withheld) {
            let caller = self.identity.caller();
            let search = &self.context.search;
            return Some(find_tools(search, served, withheld, &caller, &arguments()));
        }
        None
    }

    /// What `served` withholds from the caller, if `name` is not among it, or the call's
    /// refusal: a tool the caller may not use is refused as one that does not exist
    /// (docs/authorization.md), so no answer tells the two apart; a plane that cannot be asked
    /// serves nothing. The decision is noted for the call's audit line.
    async fn authorize(
        &self,
        served: &Arc<Served>,
        name: &str,
        note: &CallNote,
    ) -> Result<Arc<Withheld>, Result<CallToolResponse, McpError>> {
        let withheld = match self.withheld(served).await {
            Ok(withheld) => withheld,
            Err(undecided) => {
                note.authorized(Authorization::Undecided);
                let error = ToolError::new(ErrorKind::UpstreamUnavailable, undecided.to_string());
                return Err(Ok(self.refuse(error).into()));
            }
        };
        if !withheld.tool(name) {
            note.authorized(Authorization::Withheld);
            return Err(Err(unknown_tool(name)));
        }
        note.authorized(match self.context.authorizer {
            Some(_) => Authorization::Allowed,
            None => Authorization::Off,
        });
        Ok(withheld)
    }

    /// The one way a call is refused: counted under the error's kind, answered as a tool
    /// error the consumer can act on.
    fn refuse(&self, error: ToolError) -> CallToolResult {
        self.context.metrics.tool_call(error.kind.as_str());
        request_span::failed(error.kind.as_str());
        error.into_result()
    }

    /// The task, if it may still reach its providers. Past its time limit its upstream
    /// sessions are closed, so a forwarded request is refused naming the limit, not failed as
    /// the provider's fault.
    pub fn live(self: Arc<Self>) -> Result<Arc<Self>, McpError> {
        if !self.expired() {
            return Ok(self);
        }
        let error = self.time_limit(false);
        Err(McpError::invalid_request(
            error.message,
            Some(serde_json::json!({ "kind": error.kind.as_str(), "retryable": false })),
        ))
    }

    /// The refusal of a task past its time limit; `cut`: the limit passed while a call ran.
    fn time_limit(&self, cut: bool) -> ToolError {
        let limit = self.max_duration.unwrap_or_default().as_secs();
        let when = if cut {
            "passed while the call ran: it was cancelled at the provider, which may have acted \
             on it already"
        } else {
            "has passed"
        };
        ToolError::new(
            ErrorKind::Rejected,
            format!(
                "this task's time limit ({limit}s, the smallest maxTaskDurationSeconds of its \
                 bindings) {when}; start a new session"
            ),
        )
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
        let started = Instant::now();
        let mutating = base.mutating().iter().any(|m| m == name);
        let span = span_unless_unsampled(|| {
            debug_span!(
                "capstan.base_tool",
                otel.name = %format_args!("base tool {name}"),
                capstan.tool.name = %name,
                capstan.tool.mutating = mutating,
                error.type = Empty,
                otel.status_code = Empty,
            )
        });
        let arguments = Value::Object(arguments.unwrap_or_default());
        let result = match served.validate(name, &arguments) {
            Err(error) => Err(error),
            Ok(()) => base.call(name, &arguments).instrument(span.clone()).await,
        };
        self.context
            .metrics
            .tool_call_duration
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(result) => {
                self.context.metrics.tool_call("ok");
                result
            }
            Err(error) => {
                span.record("error.type", error.kind.as_str());
                span.record("otel.status_code", "error");
                self.refuse(error)
            }
        }
    }
}

/// The one answer to a tool this caller cannot call: one the composition does not offer, and
/// one it offers that the caller may not use.
pub(super) fn unknown_tool(name: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "{UNKNOWN_TOOL} {name:?} is available to this assistant; tools/list shows the ones that are"
        ),
        None,
    )
}

/// How [`unknown_tool`]'s refusal begins: what the audit line reads it by (`audit.rs`).
pub(super) const UNKNOWN_TOOL: &str = "no tool named";

/// `routed` with only the candidates the caller may use: filtered before any is scored, so a
/// route never falls through to a provider the caller may not use, and its decision names
/// none (docs/authorization.md).
pub fn usable_candidates<'a>(
    routed: &'a RoutedCapability,
    withheld: &Withheld,
) -> Cow<'a, RoutedCapability> {
    if !routed.candidates.iter().any(|c| !withheld.tool(&c.tool)) {
        return Cow::Borrowed(routed);
    }
    Cow::Owned(RoutedCapability {
        spec: routed.spec,
        tool: routed.tool.clone(),
        candidates: routed
            .candidates
            .iter()
            .filter(|c| withheld.tool(&c.tool))
            .cloned()
            .collect(),
    })
}

/// `load_skill`: the named skill's body, framed with its provenance.
async fn load_skill(composed: &Composed, arguments: &Value) -> Result<CallToolResult, ToolError> {
    let Some(name) = arguments.get("name").and_then(Value::as_str) else {
        return Err(
            ToolError::new(ErrorKind::InvalidInput, "name: required (a string)").at("name"),
        );
    };
    match composed.load_skill(name).await {
        Ok(body) => Ok(CallToolResult::success(vec![ContentBlock::text(body)])),
        Err(error @ SkillError::Unknown { .. }) => {
            Err(ToolError::new(ErrorKind::InvalidInput, error.to_string()).at("name"))
        }
        Err(error @ SkillError::Fetch { .. }) => Err(ToolError::new(
            ErrorKind::UpstreamUnavailable,
            error.to_string(),
        )),
        // Not retryable: the body stays withheld until the binding pins its digest.
        Err(error @ SkillError::Withheld(_)) => {
            Err(ToolError::new(ErrorKind::Forbidden, error.to_string()))
        }
    }
}
