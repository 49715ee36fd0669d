//! A call to a provider tool: its arguments checked against the tool's schema, forwarded (cut
//! if the task's time limit passes first), the provider's answer read for the caller, and
//! counted, traced and metered under one outcome.

use std::time::Instant;

use capstan_api::CallerAuthorization;
use capstan_compose::composer::ToolCallError;
use capstan_compose::composition::ComposedTool;
use capstan_core::tool_error::{ErrorKind, ToolError};
use capstan_upstream::mcp::{CallError, CallTraffic};
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CallToolResult, ErrorCode, JsonObject};
use serde_json::Value;

use super::super::{Served, Task};
use super::audit::CallNote;
use super::unknown_tool;
use crate::limits::{Admitted, Limited};
use crate::observe::metering::ToolInvocation;
use crate::observe::request_span;
use crate::task::request_states::Asked;

/// What a forwarded call answers the caller: the call's result or the tool error that stands
/// for it, and a protocol error that replaces both when the revision says so.
struct Answer {
    result: Result<CallToolResponse, ToolError>,
    protocol: Option<McpError>,
}

impl Answer {
    fn refused(error: ToolError) -> Self {
        Self {
            result: Err(error),
            protocol: None,
        }
    }

    /// The outcome the call is counted and metered under.
    fn outcome(&self) -> &str {
        match &self.result {
            Ok(CallToolResponse::Complete(r)) if r.is_error == Some(true) => "tool_error",
            Ok(CallToolResponse::Complete(_)) => "ok",
            Ok(_) => "input_required",
            Err(error) => error.kind.as_str(),
        }
    }

    fn into_response(self) -> Result<CallToolResponse, McpError> {
        match self.protocol {
            Some(error) => Err(error),
            None => Ok(self
                .result
                .unwrap_or_else(|error| error.into_result().into())),
        }
    }
}

/// A provider tool a call may reach: the only way to [`Task::forward`], so no call reaches a
/// provider without passing its server's limits.
pub(super) struct Cleared<'a> {
    tool: &'a ComposedTool,
    /// The call's place under the limits, released when the call ends.
    _admitted: Admitted,
}

impl Task {
    pub(super) async fn call_provider_tool(
        &self,
        served: &Served,
        name: &str,
        arguments: Option<JsonObject>,
        traffic: CallTraffic,
        note: &CallNote,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = served.composed().tool(name) else {
            return match self.unauthenticated(served, name) {
                Some(error) => Ok(self.refuse(error).into()),
                None => Err(unknown_tool(name)),
            };
        };
        let arguments = Value::Object(arguments.unwrap_or_default());
        if let Err(error) = served.validate(name, &arguments) {
            self.meter(tool, error.kind.as_str(), Instant::now(), None);
            return Ok(self.refuse(error).into());
        }
        let cleared = match self.admit(tool, note) {
            Ok(cleared) => cleared,
            Err(limited) => return Ok(self.rate_limited(tool, &limited, None).into()),
        };
        self.forward(served, cleared, arguments, None, name, traffic)
            .await
    }

    /// The refusal of a name that a server whose credential could not be had would have
    /// served (docs/upstream-auth.md "Failures"): told as `credential_unavailable`, so the
    /// caller is not told the tool does not exist. Only where every caller could have been
    /// served it: with per-tool authorization, no decision covers a name the composition does
    /// not hold, nor without it one of a binding that requires authorization — there it stays
    /// unknown, and the binding's outcome says why.
    fn unauthenticated(&self, served: &Served, name: &str) -> Option<ToolError> {
        if self.context.authorizer.is_some() {
            return None;
        }
        let (binding, error) = served.composed().unavailable(name)?;
        let requires = served.snapshot().documents.iter().any(|d| {
            d.binding == binding
                && d.spec.caller_authorization == Some(CallerAuthorization::Required)
        });
        (!requires).then(|| ToolError::from(error.clone()))
    }

    /// Lets this caller's call to `tool` pass its server's limits (`limits.rs`), or says
    /// which refuses it; every refusal is counted by binding, tool and limit, and each answer
    /// noted in `note` for the call's audit line.
    pub(super) fn admit<'a>(
        &self,
        tool: &'a ComposedTool,
        note: &CallNote,
    ) -> Result<Cleared<'a>, Limited> {
        let admitted = self.context.limits.admit(
            &self.identity.project,
            &tool.binding,
            &tool.server,
            tool.limits.as_ref(),
            self.identity.fingerprint(),
        );
        match admitted {
            Ok(admitted) => {
                note.passed(&tool.name, admitted.gated());
                Ok(Cleared {
                    tool,
                    _admitted: admitted,
                })
            }
            Err(limited) => {
                note.limited(limited.limit.as_str());
                self.context.metrics.limit_refused(
                    &tool.binding,
                    &tool.name,
                    limited.limit.as_str(),
                );
                Err(limited)
            }
        }
    }

    /// A call to `tool` a limit kept from its provider: refused as `rate_limited` with the
    /// wait before a retry may pass, and metered as refused.
    pub(super) fn rate_limited(
        &self,
        tool: &ComposedTool,
        limited: &Limited,
        capability: Option<&str>,
    ) -> CallToolResult {
        self.meter(
            tool,
            ErrorKind::RateLimited.as_str(),
            Instant::now(),
            capability,
        );
        let mut error = ToolError::new(
            ErrorKind::RateLimited,
            limited.message(&tool.binding, &tool.server),
        )
        .with_code(limited.limit.as_str());
        if let Some(wait) = limited.retry_after {
            error = error.retry_after(wait);
        }
        self.refuse(error)
    }

    /// Calls the provider tool `cleared` by its server's limits (its place among the caller's
    /// running calls held to the call's end) with `arguments` (already checked), counted,
    /// traced and metered;
    /// `capability` names the routed capability the call serves, if any, and `called` what the
    /// caller called (the tool, or the capability's `cap__*` tool): a question the provider
    /// answers with reaches the caller with its state sealed for a retry of `called`.
    pub(super) async fn forward(
        &self,
        served: &Served,
        cleared: Cleared<'_>,
        arguments: Value,
        capability: Option<&str>,
        called: &str,
        traffic: CallTraffic,
    ) -> Result<CallToolResponse, McpError> {
        let tool = cleared.tool;
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
        let answer = tokio::select! {
            biased;
            () = self.until_expired() => Answer::refused(self.time_limit(true)),
            answered = call => self.answer_of(answered, tool, called, takes_input),
        };
        let outcome = answer.outcome();
        if outcome != "ok" {
            request_span::failed(outcome);
        }
        self.context.metrics.tool_call_answered(outcome, started);
        self.meter(tool, outcome, started, capability);
        answer.into_response()
    }

    /// What the caller is answered, from what the provider answered: a question sealed for
    /// a retry of `called` to a caller that can be asked that way; a capability the caller
    /// lacks as the protocol error its revision names; any other failure as a tool error.
    fn answer_of(
        &self,
        answered: Result<CallToolResponse, ToolCallError>,
        tool: &ComposedTool,
        called: &str,
        takes_input: bool,
    ) -> Answer {
        let mut protocol = None;
        let result = match answered {
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
            Err(ToolCallError::Upstream(CallError::Refused {
                server,
                message,
                required: Some(required),
            })) if takes_input => {
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
        };
        Answer { result, protocol }
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
