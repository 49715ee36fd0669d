//! Requests forwarded to a provider besides tool calls (`prompts/get`, `resources/read`,
//! `completion/complete`, subscriptions): their parameters as the composer takes them, and the
//! provider's answer as the caller gets it.

use capstan_compose::{ErrorKind, OfferingError, ToolError};
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};

/// A request's parameters as JSON, to be rewritten for the provider.
pub(super) fn params(request: &impl serde::Serialize) -> Result<Value, McpError> {
    serde_json::to_value(request).map_err(|e| McpError::invalid_params(e.to_string(), None))
}

/// The provider's answer to a forwarded request, typed; a refusal goes to the caller as the
/// spec's error: an unknown name or URI is -32602 naming it (`data.name` / `data.uri`), the
/// provider's own error passes as it is, a provider that failed is an internal error with
/// Capstan's error kind.
pub(super) fn answer<T: serde::de::DeserializeOwned>(
    result: Result<Value, OfferingError>,
    method: &str,
) -> Result<T, McpError> {
    let value = result.map_err(|error| {
        let message = error.to_string();
        match error {
            OfferingError::UnknownPrompt { name } | OfferingError::UnknownReference { name } => {
                McpError::invalid_params(message, Some(json!({ "name": name })))
            }
            OfferingError::UnknownResource { uri } => {
                McpError::invalid_params(message, Some(json!({ "uri": uri })))
            }
            OfferingError::Refused(error) => error,
            OfferingError::Upstream(error) => {
                let error = ToolError::from(error);
                McpError::internal_error(
                    message,
                    Some(
                        json!({ "kind": error.kind.as_str(), "retryable": error.kind.retryable() }),
                    ),
                )
            }
        }
    })?;
    serde_json::from_value::<T>(value).map_err(|e| {
        McpError::internal_error(
            format!("the provider's answer to {method} is malformed: {e}"),
            Some(json!({ "kind": ErrorKind::UpstreamMalformed.as_str(), "retryable": false })),
        )
    })
}
