//! A routed (`cap.*`) call: the routing arguments taken out and the rest checked against the
//! capability's schema, the decision made and recorded whatever its outcome, and the call
//! forwarded to the chosen provider (`task/call/provider.rs`); a retry answering a provider's
//! question goes back to the provider that asked, if it is still eligible.

use capstan_compose::capabilities::{MAX_INTENT_LEN, RoutedCapability};
use capstan_compose::composition::ComposedTool;
use capstan_core::tool_error::{ErrorKind, ToolError};
use capstan_route::{Decision, Exclusion, Reason, Taken};
use capstan_upstream::mcp::CallTraffic;
use capstan_upstream::trace_context::span_unless_unsampled;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CallToolResult, JsonObject};
use serde_json::Value;
use tracing::field::Empty;
use tracing::{Span, debug_span, info, warn};

use super::super::{Served, Task};
use super::audit::CallNote;
use super::provider::Cleared;
use crate::limits::Limited;
use crate::routing::decide::{decide, no_eligible_provider};
use crate::routing::decisions::DecisionRecord;
use crate::task::request_states::Asked;

impl Task {
    /// A routed call: take out the routing arguments, check the rest against the capability's
    /// schema, decide (recorded whatever the outcome), and forward to the chosen provider. A
    /// retry answering a question (`asked`) goes back to the provider that asked, if it is
    /// still a candidate of this capability and eligible for this call.
    pub(super) async fn call_capability(
        &self,
        served: &Served,
        routed: &RoutedCapability,
        arguments: Option<JsonObject>,
        traffic: CallTraffic,
        asked: Option<Asked>,
        note: &CallNote,
    ) -> Result<CallToolResponse, McpError> {
        let capability = routed.spec.capability_id.as_str();
        let called: &str = &routed.tool.name;
        let (taken, arguments) = match routing_arguments(served, routed, arguments) {
            Ok(split) => split,
            Err(error) => return Ok(self.refuse(error).into()),
        };
        let passed = if let Some(asked) = asked {
            // Not routed again: another provider must never see one provider's state or the
            // caller's answers to it. The seal binds the state to this capability and caller;
            // eligibility is judged again, as the call is made again.
            match self.asker_still_eligible(served, routed, &taken, &asked.by) {
                Ok(tool) => match self.admit(tool, note) {
                    Ok(cleared) => Passed::Cleared(cleared),
                    Err(limited) => Passed::Limited(tool, limited),
                },
                Err(error) => return Ok(self.refuse(error).into()),
            }
        } else if traffic.input_responses.is_some() {
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
        } else {
            match self.decided(served, routed, &taken, note) {
                Ok(passed) => passed,
                Err(refused) => return Ok(refused.into()),
            }
        };
        match passed {
            Passed::Cleared(cleared) => {
                self.forward(
                    served,
                    cleared,
                    arguments,
                    Some(capability),
                    called,
                    traffic,
                )
                .await
            }
            Passed::Limited(tool, limited) => {
                Ok(self.rate_limited(tool, &limited, Some(capability)).into())
            }
            Passed::NoneEligible(why) => {
                let error =
                    ToolError::new(ErrorKind::Rejected, why).with_code("no_eligible_provider");
                Ok(self.refuse(error).into())
            }
        }
    }

    /// The first ranked candidate of `decision` that passes its server's limits; each one a
    /// limit refuses is moved from the ranking to the exclusions (`rate_limited`), so the next
    /// serves and the recorded decision says why. Routed calls thus count against the provider
    /// finally chosen.
    fn pass_limits<'a>(
        &self,
        served: &'a Served,
        decision: &mut Decision,
        note: &CallNote,
    ) -> Passed<'a> {
        let mut first_limited = None;
        while let Some(ranked) = decision.ranked.first() {
            let Some(tool) = served.composed().tool(&ranked.candidate.tool) else {
                // Ranked candidates are composed (`target_missing` excludes the rest).
                break;
            };
            match self.admit(tool, note) {
                Ok(cleared) => return Passed::Cleared(cleared),
                Err(limited) => {
                    let ranked = decision.ranked.remove(0);
                    decision.exclusions.push(Exclusion {
                        binding: ranked.candidate.binding,
                        tool: ranked.candidate.tool,
                        reason: Reason::RateLimited,
                    });
                    first_limited.get_or_insert((tool, limited));
                }
            }
        }
        decision.route_reason = None;
        match first_limited {
            Some((tool, limited)) => Passed::Limited(tool, limited),
            None => Passed::NoneEligible(no_eligible_provider(decision)),
        }
    }

    /// The decision of a routed call, its candidates passed through their servers' limits,
    /// made in its own span and recorded whatever the outcome;
    /// a route refused before any candidate was looked at is answered in the request's span,
    /// which carries the error.
    fn decided<'a>(
        &self,
        served: &'a Served,
        routed: &RoutedCapability,
        taken: &Taken,
        note: &CallNote,
    ) -> Result<Passed<'a>, CallToolResult> {
        let capability = routed.spec.capability_id.as_str();
        let digest = taken
            .intent
            .as_deref()
            .map(|intent| self.context.decisions.intent_digest(intent));
        let decided = {
            let _deciding = route_span(capability).entered();
            match decide(routed, served.snapshot(), &taken.route, &taken.requirements) {
                Ok(mut decision) => {
                    let passed = self.pass_limits(served, &mut decision, note);
                    self.record_decision(capability, &decision, digest.clone());
                    Ok(passed)
                }
                Err(why) => {
                    Span::current().record("capstan.route.reason", "refused");
                    Err(why)
                }
            }
        };
        decided.map_err(|why| self.route_refused(capability, why.to_string(), digest))
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
        let record =
            DecisionRecord::refused(&self.identity.project, capability, why.clone(), digest);
        self.context
            .decisions
            .record(record.by(self.identity.fingerprint()));
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
        self.context.decisions.record(
            DecisionRecord::of(&self.identity.project, decision, digest)
                .by(self.identity.fingerprint()),
        );
    }
}

/// What the limits left of a routed call's decision.
enum Passed<'a> {
    /// The first ranked candidate a limit let pass.
    Cleared(Cleared<'a>),
    /// Every ranked candidate was limited: the best-ranked one and its limit.
    Limited(&'a ComposedTool, Limited),
    /// Nothing was eligible to begin with: why, naming every exclusion.
    NoneEligible(String),
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
    span_unless_unsampled(|| {
        debug_span!(
            "capstan.route",
            otel.name = %format_args!("route {capability}"),
            capstan.route.capability = capability,
            capstan.route.reason = Empty,
            capstan.route.winner = Empty,
            capstan.route.eligible = Empty,
            capstan.route.excluded = Empty,
        )
    })
}
