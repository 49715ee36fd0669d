//! Tool errors a consumer can act on: a result with `isError: true` and
//! `structuredContent.error = {kind, message, retryable, field?, code?}` (README, "Errors").

use rmcp::model::CallToolResult;
use serde::Serialize;
use serde_json::json;

/// The failure classes a consumer must be able to tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The arguments do not fit the tool's input schema: fix them and call again.
    InvalidInput,
    /// A correctable business rejection.
    Rejected,
    /// Authorization or tenancy.
    Forbidden,
    /// The upstream could not be reached or did not answer in time.
    UpstreamUnavailable,
    /// The upstream answered with something unusable.
    UpstreamMalformed,
    /// A write whose result is not known.
    OutcomeUnknown,
    /// A plan token was refused: nothing changed, plan again.
    StalePlan,
    /// The provider asked the caller something during the call and the caller did not answer
    /// in time: the call was cancelled; answer the question next time.
    Unanswered,
    /// A limit on calls to the provider's server (per caller, concurrent, or in total) was
    /// reached; the call did not reach the provider. Call again after `retryAfterMs`, or once
    /// a running call has finished when there is none.
    RateLimited,
    /// The credential Capstan authenticates to the provider with (a Secret, a workload token,
    /// a token exchanged for the caller's) could not be had; the call did not reach the
    /// provider. Not the provider's fault: the message says what to fix. Retryable when the
    /// cause may pass (a token service down).
    CredentialUnavailable,
}

impl ErrorKind {
    /// The kind as written on the wire and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid_input",
            Self::Rejected => "rejected",
            Self::Forbidden => "forbidden",
            Self::UpstreamUnavailable => "upstream_unavailable",
            Self::UpstreamMalformed => "upstream_malformed",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::StalePlan => "stale_plan",
            Self::Unanswered => "unanswered",
            Self::RateLimited => "rate_limited",
            Self::CredentialUnavailable => "credential_unavailable",
        }
    }

    /// Whether calling again unchanged may succeed.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::UpstreamUnavailable | Self::Unanswered | Self::RateLimited
        )
    }
}

/// One tool error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError {
    /// Its class.
    pub kind: ErrorKind,
    /// What happened and what to do next.
    pub message: String,
    /// The argument at fault, as a dotted path, for `invalid_input`.
    pub field: Option<String>,
    /// A finer, stable name for the failure within its kind (`kind_not_served`).
    pub code: Option<&'static str>,
    /// Whether calling again unchanged may succeed, when the kind's default is wrong for this
    /// failure.
    pub retryable: Option<bool>,
    /// How long to wait before a retry may succeed, for `rate_limited`.
    pub retry_after: Option<std::time::Duration>,
}

impl ToolError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            field: None,
            code: None,
            retryable: None,
            retry_after: None,
        }
    }

    /// The same error naming the argument at fault.
    pub fn at(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// The same error with a finer code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The same error, saying whether a retry unchanged may succeed.
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = Some(retryable);
        self
    }

    /// The same error, saying when a retry may succeed (`retryAfterMs`, rounded up).
    pub fn retry_after(mut self, wait: std::time::Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// The error as an MCP tool result.
    pub fn into_result(self) -> CallToolResult {
        let mut error = json!({
            "kind": self.kind,
            "message": self.message,
            "retryable": self.retryable.unwrap_or(self.kind.retryable()),
        });
        if let Some(field) = self.field {
            error["field"] = json!(field);
        }
        if let Some(code) = self.code {
            error["code"] = json!(code);
        }
        if let Some(wait) = self.retry_after {
            // Rounded up, so a caller that waits exactly this long is not refused again.
            error["retryAfterMs"] = json!(wait.as_nanos().div_ceil(1_000_000));
        }
        CallToolResult::structured_error(json!({ "error": error }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_error_result_should_carry_kind_message_retryable_and_field() {
        let mut error = ToolError::new(ErrorKind::InvalidInput, "name: required");
        error.field = Some("name".into());
        let result = error.into_result();
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.structured_content.unwrap(),
            json!({"error": {"kind": "invalid_input", "message": "name: required",
                             "retryable": false, "field": "name"}})
        );
    }

    #[test]
    fn a_rate_limited_call_should_say_when_to_retry_rounded_up() {
        let limited = ToolError::new(ErrorKind::RateLimited, "over the limit")
            .with_code("calls_per_minute_per_caller")
            .retry_after(std::time::Duration::from_micros(1_500));
        assert_eq!(
            limited.into_result().structured_content.unwrap(),
            json!({"error": {"kind": "rate_limited", "message": "over the limit",
                             "retryable": true, "code": "calls_per_minute_per_caller",
                             "retryAfterMs": 2}})
        );
    }

    #[test]
    fn an_unavailable_upstream_should_be_retryable_unless_said_otherwise() {
        let unavailable = ToolError::new(ErrorKind::UpstreamUnavailable, "down");
        assert_eq!(
            unavailable.into_result().structured_content.unwrap()["error"]["retryable"],
            json!(true)
        );
        let refused = ToolError::new(ErrorKind::UpstreamUnavailable, "down").retryable(false);
        assert_eq!(
            refused.into_result().structured_content.unwrap()["error"]["retryable"],
            json!(false)
        );
    }
}
