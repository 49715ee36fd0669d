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
        }
    }

    /// Whether calling again unchanged may succeed.
    pub fn retryable(self) -> bool {
        matches!(self, Self::UpstreamUnavailable | Self::Unanswered)
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
