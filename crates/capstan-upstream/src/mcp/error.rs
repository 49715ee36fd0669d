//! What goes wrong with an upstream: why it contributed no tools ([`ConnectError`]) and why a
//! forwarded tool call produced no result ([`CallError`], in the error kinds README.md lists
//! that a caller can tell apart: not allowed, invalid input, unavailable, malformed).

use capstan_core::tool_error::{ErrorKind, ToolError};
use thiserror::Error;

use crate::credential::CredentialError;
use crate::guard::Refusal;

/// Why an upstream contributed no tools.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConnectError {
    /// The endpoint is outside the allow-list or resolves to a refused address.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Connecting or initializing failed or took too long.
    #[error("connecting to {endpoint}: {message}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// What failed.
        message: String,
    },
    /// `tools/list` failed.
    #[error("listing the tools of {endpoint}: {message}")]
    List {
        /// The endpoint.
        endpoint: String,
        /// What failed.
        message: String,
    },
    /// The credential its `auth` block asks for could not be had: nothing was sent.
    #[error("no credential for {endpoint}: {failed}")]
    Credential {
        /// The endpoint.
        endpoint: String,
        /// Why, and what to fix.
        failed: CredentialError,
    },
}

/// Why a forwarded call produced no result. Each maps onto one of the error kinds README.md lists.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CallError {
    /// The tool is not on the server's allow-list.
    #[error("tool {tool} is not allowed on MCP server {server}")]
    NotAllowed {
        /// The MCP server entry.
        server: String,
        /// The tool's upstream name.
        tool: String,
    },
    /// The upstream refused the arguments.
    #[error("{server} refused the arguments of {tool}: {message}")]
    InvalidInput {
        /// The MCP server entry.
        server: String,
        /// The tool's upstream name.
        tool: String,
        /// The upstream's message.
        message: String,
    },
    /// The upstream refused the call for a reason the caller must fix: a capability its client
    /// did not declare (-32021, 2026-07-28).
    #[error("{server} refused the call: {message}")]
    Refused {
        /// The MCP server entry.
        server: String,
        /// The upstream's message.
        message: String,
        /// The capabilities it requires, as far as a caller can declare them through Capstan
        /// (`required_capabilities`).
        required: Option<serde_json::Value>,
    },
    /// The upstream cannot be reached or did not answer in time.
    #[error("{server} is unavailable: {message}")]
    Unavailable {
        /// The MCP server entry.
        server: String,
        /// What failed.
        message: String,
    },
    /// The upstream asked the caller something (elicitation, sampling, roots) mid-call and the
    /// caller did not answer in time: the call was given up (cancelled at the provider).
    #[error(
        "{server} asked the client {method} and it did not answer within {}s (CAPSTAN_QUESTION_TIMEOUT_SECONDS); the call was cancelled at the provider",
        waited.as_secs()
    )]
    Unanswered {
        /// The MCP server entry.
        server: String,
        /// What it asked.
        method: String,
        /// How long the question waited.
        waited: std::time::Duration,
    },
    /// The upstream asked for something the platform does not let it ask (a URL-mode
    /// elicitation to a host its binding does not admit): refused before the person saw it.
    #[error("{server} asked for something its binding does not allow: {message}")]
    Forbidden {
        /// The MCP server entry.
        server: String,
        /// What it asked and what is allowed.
        message: String,
    },
    /// The credential the server's `auth` block asks for could not be had: the call was not
    /// sent.
    #[error("no credential for {server}, so the call was not sent: {failed}")]
    Credential {
        /// The MCP server entry.
        server: String,
        /// Why, and what to fix.
        failed: CredentialError,
    },
    /// The upstream answered with something that is not a tool result.
    #[error("{server} answered with a malformed response: {message}")]
    Malformed {
        /// The MCP server entry.
        server: String,
        /// What was wrong.
        message: String,
    },
}

impl From<CallError> for ToolError {
    fn from(error: CallError) -> Self {
        let retryable = match &error {
            CallError::Credential { failed, .. } => Some(failed.transient),
            _ => None,
        };
        let mut tool_error = Self::new(error.kind(), error.to_string());
        tool_error.retryable = retryable;
        tool_error
    }
}

impl CallError {
    /// The error kind a caller sees for this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CallError::NotAllowed { .. } | CallError::Forbidden { .. } => ErrorKind::Forbidden,
            CallError::InvalidInput { .. } => ErrorKind::InvalidInput,
            CallError::Refused { .. } => ErrorKind::Rejected,
            CallError::Unavailable { .. } => ErrorKind::UpstreamUnavailable,
            CallError::Malformed { .. } => ErrorKind::UpstreamMalformed,
            CallError::Unanswered { .. } => ErrorKind::Unanswered,
            CallError::Credential { .. } => ErrorKind::CredentialUnavailable,
        }
    }
}

/// The client capabilities a provider's -32021 says it requires (`data.requiredCapabilities`),
/// confined to those a caller can declare to a provider through Capstan — the requests the
/// relay carries (`sampling`, `elicitation`, `roots`), each an object — so that what reaches
/// the caller in Capstan's error asks only for what Capstan can carry; `None` when nothing
/// such is named.
pub(crate) fn required_capabilities(data: Option<&serde_json::Value>) -> Option<serde_json::Value> {
    let named = data?.get("requiredCapabilities")?.as_object()?;
    let kept: serde_json::Map<String, serde_json::Value> = ["sampling", "elicitation", "roots"]
        .into_iter()
        .filter_map(|key| {
            let value = named.get(key)?;
            value.is_object().then(|| (key.to_owned(), value.clone()))
        })
        .collect();
    (!kept.is_empty()).then_some(serde_json::Value::Object(kept))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use capstan_core::tool_error::ToolError;
    use serde_json::json;

    use super::{CallError, required_capabilities};

    #[test]
    fn an_unavailable_upstream_should_be_a_retryable_tool_error() {
        let unavailable = ToolError::from(CallError::Unavailable {
            server: "s".into(),
            message: "down".into(),
        })
        .into_result();
        assert_eq!(
            unavailable.structured_content.unwrap()["error"]["retryable"],
            json!(true)
        );
    }

    #[test]
    fn a_providers_required_capabilities_should_name_only_what_a_caller_can_declare() {
        let data = json!({"requiredCapabilities": {
            "sampling": {"tools": {}},
            "elicitation": "yes",
            "x-capstan-admin": {},
            "experimental": {"anything": {}}
        }});
        assert_eq!(
            required_capabilities(Some(&data)),
            Some(json!({"sampling": {"tools": {}}}))
        );
        let nothing_carried = json!({"requiredCapabilities": {"experimental": {}}});
        assert_eq!(required_capabilities(Some(&nothing_carried)), None);
        assert_eq!(
            required_capabilities(Some(&json!({"requiredCapabilities": ["sampling"]}))),
            None
        );
        assert_eq!(required_capabilities(None), None);
    }
}
