//! Requests forwarded to a provider besides tool calls (`prompts/get`, `resources/read`,
//! `completion/complete`, subscriptions): their parameters as the composer takes them, and the
//! provider's answer as the caller gets it.

use capstan_compose::composer::OfferingError;
use capstan_core::tool_error::{ErrorKind, ToolError};
use rmcp::ErrorData as McpError;
use rmcp::model::{GetPromptResult, InputRequiredResult, ReadResourceResult, ResultType};
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
            OfferingError::UnknownResource { uri } | OfferingError::UnsafeUri { uri, .. } => {
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

/// A provider's answer that is a whole result (its `resultType` set to `complete`, which
/// 2026-07-28 requires; the answer takes it out again for a session revision,
/// `edge/answer.rs`).
pub(super) trait Complete {
    fn completed(self) -> Self;
}

impl Complete for GetPromptResult {
    fn completed(mut self) -> Self {
        self.result_type.get_or_insert(ResultType::COMPLETE);
        self
    }
}

impl Complete for ReadResourceResult {
    fn completed(mut self) -> Self {
        self.result_type.get_or_insert(ResultType::COMPLETE);
        self
    }
}

/// The provider's answer to `method` as the caller gets it: its result, or — from a provider of
/// 2026-07-28 — its `input_required` result, passed as it is to a caller that can take one
/// (`takes_input`: a 2026-07-28 caller, whose retry with `inputResponses` and `requestState`
/// reaches the provider unread). A session caller is never sent one (its providers ask
/// mid-call): a provider that answers one anyway is reported as malformed.
pub(super) fn response<T, R>(
    result: Result<Value, OfferingError>,
    method: &str,
    takes_input: bool,
) -> Result<R, McpError>
where
    T: serde::de::DeserializeOwned + Complete,
    R: From<T> + From<InputRequiredResult>,
{
    let value = answer::<Value>(result, method)?;
    let malformed = |message: String| {
        McpError::internal_error(
            message,
            Some(json!({ "kind": ErrorKind::UpstreamMalformed.as_str(), "retryable": false })),
        )
    };
    if value.get("resultType").and_then(Value::as_str) == Some("input_required") {
        if !takes_input {
            return Err(malformed(format!(
                "the provider asked for input to {method} (an input_required result), which \
                 this session's client cannot be asked that way"
            )));
        }
        return serde_json::from_value::<InputRequiredResult>(value)
            .map(R::from)
            .map_err(|e| malformed(format!("an input_required result that is not one: {e}")));
    }
    serde_json::from_value::<T>(value)
        .map(|result| R::from(result.completed()))
        .map_err(|e| {
            malformed(format!(
                "the provider's answer to {method} is malformed: {e}"
            ))
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rmcp::model::GetPromptResponse;

    use super::*;

    fn asked() -> Value {
        json!({
            "resultType": "input_required",
            "inputRequests": {"ok": {"method": "elicitation/create", "params": {
                "mode": "form", "message": "Approve?",
                "requestedSchema": {"type": "object", "properties": {}}}}},
            "requestState": "opaque",
        })
    }

    #[test]
    fn an_input_required_answer_should_reach_only_a_caller_that_can_take_it() {
        let taken =
            response::<GetPromptResult, GetPromptResponse>(Ok(asked()), "prompts/get", true);
        match taken.unwrap() {
            GetPromptResponse::InputRequired(result) => {
                assert_eq!(result.request_state.as_deref(), Some("opaque"));
            }
            other => panic!("{other:?}"),
        }
        let refused =
            response::<GetPromptResult, GetPromptResponse>(Ok(asked()), "prompts/get", false)
                .unwrap_err();
        assert_eq!(refused.data.unwrap()["kind"], "upstream_malformed");
        assert!(refused.message.contains("cannot be asked that way"));
    }

    #[test]
    fn a_whole_answer_should_be_marked_complete() {
        let answer = json!({"messages": []});
        let taken =
            response::<GetPromptResult, GetPromptResponse>(Ok(answer), "prompts/get", false);
        match taken.unwrap() {
            GetPromptResponse::Complete(result) => {
                assert_eq!(result.result_type, Some(ResultType::COMPLETE));
            }
            other => panic!("{other:?}"),
        }
    }
}
