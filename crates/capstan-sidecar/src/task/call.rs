//! How a task answers a `tools/call` (`edge/tools_call.rs`, in a session or without one): the
//! caller and the time limit, then a built-in, a base platform tool, a routed
//! capability or a provider tool. Every call is counted once under its outcome
//! (`Task::refuse` for every refusal); calls that reach a provider are traced and metered.

use std::sync::Arc;
use std::time::Instant;

use capstan_compose::capabilities::MAX_INTENT_LEN;
use capstan_compose::capabilities::RoutedCapability;
use capstan_compose::composer::Composed;
use capstan_compose::composer::SkillError;
use capstan_compose::composer::ToolCallError;
use capstan_compose::composition::ComposedTool;
use capstan_core::tool_error::{ErrorKind, ToolError};
use capstan_platform::BaseTools;
use capstan_route::{Decision, Taken};
use capstan_upstream::mcp::CallError;
use capstan_upstream::mcp::CallTraffic;
use capstan_upstream::mcp::CallerSide;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode, JsonObject,
};
use serde_json::Value;
use tracing::field::Empty;
use tracing::{Instrument, Span, debug_span, info, warn};

use super::{ANOTHER_CALLER, Busy, LOAD_SKILL, Served, Task};
use crate::caller::identity::Identity;
use crate::observe::metering::ToolInvocation;
use crate::observe::request_span;
use crate::routing::decide::{decide, no_eligible_provider};
use crate::routing::decisions::DecisionRecord;
use crate::task::request_states::Asked;

impl Task {
    /// Serves one `tools/call` of this task: identity, the task's time limit, then a built-in,
    /// a base tool, a routed capability or a provider tool. Errors a consumer can act on come
    /// back as tool results; only an unknown tool is a protocol error. A call that reaches a
    /// provider carries the caller's `_meta`, and the provider's progress, log messages and
    /// questions about it go to `caller_side` (the caller's stream; capstan-upstream
    /// `mcp/relay.rs`). A 2026-07-28 provider's `input_required` result reaches a 2026-07-28
    /// caller as it is, and its retry (`inputResponses`, `requestState`) the same provider.
    pub async fn call(
        &self,
        caller: Option<&Identity>,
        request: CallToolRequestParams,
        caller_side: Option<CallerSide>,
    ) -> Result<CallToolResponse, McpError> {
        let _busy = Busy::new(self);
        if !self.owned_by(caller) {
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
        let composed = served.composed();
        if name == LOAD_SKILL && !composed.composition.skills.is_empty() {
            let arguments = Value::Object(arguments.unwrap_or_default());
            let result = match load_skill(composed, &arguments).await {
                Ok(result) => {
                    self.context.metrics.tool_call("ok");
                    result
                }
                Err(error) => self.refuse(error),
            };
            return Ok(result.into());
        }
        if let Some(base) = served.base()
            && base.has(&name)
        {
            let result = self.call_base_tool(&served, base, &name, arguments).await;
            return Ok(result.into());
        }
        if let Some(routed) = composed.capability(&name) {
            return self
                .call_capability(&served, routed, arguments, traffic, asked)
                .await;
        }
        self.call_provider_tool(&served, &name, arguments, traffic)
            .await
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

    /// A routed call: take out the routing arguments, check the rest against the capability's
    /// schema, decide (recorded whatever the outcome), and forward to the chosen provider. A
    /// retry answering a question (`asked`) goes back to the provider that asked, if it is
    /// still a candidate of this capability and eligible for this call.
    async fn call_capability(
        &self,
        served: &Served,
        routed: &RoutedCapability,
        arguments: Option<JsonObject>,
        traffic: CallTraffic,
        asked: Option<Asked>,
    ) -> Result<CallToolResponse, McpError> {
        let capability = routed.spec.capability_id.as_str();
        let called: &str = &routed.tool.name;
        let (taken, arguments) = match routing_arguments(served, routed, arguments) {
            Ok(split) => split,
            Err(error) => return Ok(self.refuse(error).into()),
        };
        if let Some(asked) = asked {
            // Not routed again: another provider must never see one provider's state or the
            // caller's answers to it. The seal binds the state to this capability and caller;
            // eligibility is judged again, as the call is made again.
            return match self.asker_still_eligible(served, routed, &taken, &asked.by) {
                Ok(tool) => {
                    self.forward(served, tool, arguments, Some(capability), called, traffic)
                        .await
                }
                Err(error) => Ok(self.refuse(error).into()),
            };
        }
        if traffic.input_responses.is_some() {
            return Ok(self
                .refuse(
                    ToolError::new(
                        ErrorKind::Rejected,
                        format!(
                            "inputResponses answer a question of one provider of {capability}; \
                             send them with the requestState that came with the question"
                        ),
                    )
                    .at("requestState"),
                )
                .into());
        }
        let digest = taken
            .intent
            .as_deref()
            .map(|intent| self.context.decisions.intent_digest(intent));
        let decided = {
            let _deciding = route_span(capability).entered();
            let decided = decide(routed, served.snapshot(), &taken.route, &taken.requirements);
            match &decided {
                Ok(decision) => self.record_decision(capability, decision, digest.clone()),
                Err(_) => {
                    Span::current().record("capstan.route.reason", "refused");
                }
            }
            decided
        };
        // Refused in the request's span, which carries the error.
        let decision = match decided {
            Ok(decision) => decision,
            Err(why) => {
                return Ok(self
                    .route_refused(capability, why.to_string(), digest)
                    .into());
            }
        };
        let Some(tool) = decision
            .selected()
            .and_then(|winner| served.composed().tool(&winner.tool))
        else {
            let error = ToolError::new(ErrorKind::Rejected, no_eligible_provider(&decision))
                .with_code("no_eligible_provider");
            return Ok(self.refuse(error).into());
        };
        self.forward(served, tool, arguments, Some(capability), called, traffic)
            .await
    }

    /// The provider tool `asker` of a routed capability, if it is still one of its composed
    /// candidates and not excluded from this call (the route and requirements the retry
    /// carries, the qualifiers in force now).
    fn asker_still_eligible<'a>(
        &self,
        served: &'a Served,
        routed: &RoutedCapability,
        taken: &Taken,
        asker: &str,
    ) -> Result<&'a ComposedTool, ToolError> {
        let capability = routed.spec.capability_id.as_str();
        let refused = |why: String| {
            ToolError::new(
                ErrorKind::Rejected,
                format!(
                    "the provider that asked ({asker}) {why}; call {capability} again without \
                     inputResponses and requestState"
                ),
            )
            .with_code("asker_not_eligible")
        };
        let candidate = routed
            .candidates
            .iter()
            .any(|c| c.tool == asker && c.composed);
        let tool = served
            .composed()
            .tool(asker)
            .filter(|_| candidate)
            .ok_or_else(|| refused(format!("is no longer a provider of {capability}")))?;
        let decision = decide(routed, served.snapshot(), &taken.route, &taken.requirements)
            .map_err(|why| refused(format!("cannot be routed to now: {why}")))?;
        if let Some(excluded) = decision.exclusions.iter().find(|e| e.tool == asker) {
            return Err(refused(format!(
                "is not eligible for this call: {}",
                excluded.reason.as_str()
            )));
        }
        Ok(tool)
    }

    /// A route refused before any candidate was looked at: counted, logged and recorded.
    fn route_refused(
        &self,
        capability: &str,
        why: String,
        digest: Option<String>,
    ) -> CallToolResult {
        warn!(capability, %why, "routed call refused");
        self.context
            .metrics
            .route_decision(capability, "refused", &[]);
        self.context.decisions.record(DecisionRecord::refused(
            &self.identity.project,
            capability,
            why.clone(),
            digest,
        ));
        self.refuse(ToolError::new(ErrorKind::Rejected, why).with_code("route_refused"))
    }

    /// A decision made: counted by its reason and exclusions, logged, and recorded for
    /// `GET /v1/route-decisions`.
    fn record_decision(&self, capability: &str, decision: &Decision, digest: Option<String>) {
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
        let span = Span::current();
        span.record("capstan.route.reason", reason);
        span.record("capstan.route.eligible", decision.eligible());
        span.record("capstan.route.excluded", decision.exclusions.len());
        if let Some(winner) = decision.selected() {
            span.record("capstan.route.winner", winner.tool.as_str());
        }
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
            .record(DecisionRecord::of(&self.identity.project, decision, digest));
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
        let span = debug_span!(
            "capstan.base_tool",
            otel.name = %format_args!("base tool {name}"),
            capstan.tool.name = %name,
            capstan.tool.mutating = mutating,
            error.type = Empty,
            otel.status_code = Empty,
        );
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

    async fn call_provider_tool(
        &self,
        served: &Served,
        name: &str,
        arguments: Option<JsonObject>,
        traffic: CallTraffic,
    ) -> Result<CallToolResponse, McpError> {
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
            self.meter(tool, error.kind.as_str(), Instant::now(), None);
            return Ok(self.refuse(error).into());
        }
        self.forward(served, tool, arguments, None, name, traffic)
            .await
    }

    /// Calls provider `tool` with `arguments` (already checked), counted, traced and metered;
    /// `capability` names the routed capability the call serves, if any, and `called` what the
    /// caller called (the tool, or the capability's `cap__*` tool): a question the provider
    /// answers with reaches the caller with its state sealed for a retry of `called`.
    async fn forward(
        &self,
        served: &Served,
        tool: &ComposedTool,
        arguments: Value,
        capability: Option<&str>,
        called: &str,
        traffic: CallTraffic,
    ) -> Result<CallToolResponse, McpError> {
        request_span::served_by(&tool.service_name, capability);
        let takes_input = traffic.takes_input();
        let started = Instant::now();
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let call = served
            .composed()
            .call_tool_with(&tool.name, arguments, traffic);
        // The time limit ends the task's upstream sessions; a call running then is cut here
        // (dropping it cancels it at the provider) rather than failing as the provider's fault.
        let mut protocol = None;
        let result = tokio::select! {
            biased;
            () = self.until_expired() => Err(self.time_limit(true)),
            answered = call => match answered {
                Ok(CallToolResponse::Complete(result)) => Ok(CallToolResponse::Complete(result)),
                // Only a 2026-07-28 caller can answer a question this way; a session-revision
                // caller is asked mid-call (and its requests declare no capability upstream).
                Ok(CallToolResponse::InputRequired(mut asked)) if takes_input => {
                    let sealed = Asked {
                        by: tool.name.clone(),
                        state: asked.request_state.take(),
                    };
                    asked.request_state = Some(self.seal_state("tools/call", called, &sealed));
                    Ok(CallToolResponse::InputRequired(asked))
                }
                Ok(_) => Err(ToolError::new(
                    ErrorKind::UpstreamMalformed,
                    format!(
                        "{} asked for input (an input_required result), which this session's \
                         client cannot be asked that way and did not offer",
                        tool.service_name
                    ),
                )),
                // A 2026-07-28 caller is told a capability it lacks as the revision says a
                // server tells it: -32021 naming what is required (HTTP 400), not a tool error.
                Err(ToolCallError::Upstream(CallError::Refused { server, message, required: Some(required) }))
                    if takes_input =>
                {
                    protocol = Some(McpError::new(
                        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                        format!("{server} refused the call: {message}"),
                        Some(serde_json::json!({ "requiredCapabilities": required })),
                    ));
                    Err(ToolError::new(ErrorKind::Rejected, message))
                }
                Err(ToolCallError::Upstream(error)) => Err(ToolError::from(error)),
                Err(error @ ToolCallError::Unknown { .. }) => {
                    Err(ToolError::new(ErrorKind::Forbidden, error.to_string()))
                }
            },
        };
        let outcome = match &result {
            Ok(CallToolResponse::Complete(r)) if r.is_error == Some(true) => "tool_error",
            Ok(CallToolResponse::Complete(_)) => "ok",
            Ok(_) => "input_required",
            Err(error) => error.kind.as_str(),
        };
        if outcome != "ok" {
            request_span::failed(outcome);
        }
        self.context.metrics.tool_call_answered(outcome, started);
        self.meter(tool, outcome, started, capability);
        match protocol {
            Some(error) => Err(error),
            None => Ok(result.unwrap_or_else(|error| error.into_result().into())),
        }
    }

    fn meter(
        &self,
        tool: &ComposedTool,
        outcome: &str,
        started: Instant,
        capability: Option<&str>,
    ) {
        self.context.meter.record(&ToolInvocation {
            time: k8s_openapi::jiff::Timestamp::now(),
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

/// The routing arguments (`route`, `requirements`, `intent`) taken out of a routed call's
/// `arguments`, and the rest checked against the capability's own schema.
fn routing_arguments(
    served: &Served,
    routed: &RoutedCapability,
    arguments: Option<JsonObject>,
) -> Result<(Taken, Value), ToolError> {
    let mut arguments = arguments.unwrap_or_default();
    let taken = capstan_route::take_from(&mut arguments).map_err(|errors| {
        let message: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let error = ToolError::new(ErrorKind::InvalidInput, message.join("; "));
        match errors.first() {
            Some(first) => error.at(first.path.clone()),
            None => error,
        }
    })?;
    if let Some(intent) = &taken.intent
        && intent.chars().count() as u64 > MAX_INTENT_LEN
    {
        return Err(ToolError::new(
            ErrorKind::InvalidInput,
            format!("intent: at most {MAX_INTENT_LEN} characters"),
        )
        .at("intent"));
    }
    let arguments = Value::Object(arguments);
    served.validate(&routed.tool.name, &arguments)?;
    Ok((taken, arguments))
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

/// The span of a routing decision: the capability, and once decided the reason, the winner and
/// how many providers were eligible or excluded.
fn route_span(capability: &str) -> Span {
    debug_span!(
        "capstan.route",
        otel.name = %format_args!("route {capability}"),
        capstan.route.capability = capability,
        capstan.route.reason = Empty,
        capstan.route.winner = Empty,
        capstan.route.eligible = Empty,
        capstan.route.excluded = Empty,
    )
}
