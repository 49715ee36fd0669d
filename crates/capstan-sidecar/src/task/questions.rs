//! The questions a task's 2026-07-28 caller is asked (`input_required` results) and its
//! retries: the provider's `requestState` goes out sealed with who asked and comes back only
//! if it verifies (`task/request_states.rs`), for tool calls (`task/call.rs`), prompts and reads
//! alike.

use rmcp::ErrorData as McpError;
use serde_json::Value;
use tracing::warn;

use super::Task;
use crate::observe::request_span;
use crate::task::request_states::Asked;
use capstan_core::tool_error::ErrorKind;

impl Task {
    /// What a sealed `requestState` of a retry of `method` on `called` says was asked, or the
    /// JSON-RPC error refusing it (counted as a rejected call).
    pub(crate) fn open_state(
        &self,
        method: &str,
        called: &str,
        sealed: &str,
    ) -> Result<Asked, McpError> {
        self.context
            .states
            .open(&self.identity, method, called, sealed)
            .inspect_err(|_| {
                self.context.metrics.tool_call(ErrorKind::Rejected.as_str());
                request_span::failed(ErrorKind::Rejected.as_str());
                warn!(project = %self.identity.project, method, %called, "a requestState failed verification");
            })
    }

    /// `asked`'s state sealed for this caller's retry of `method` on `called`.
    pub(crate) fn seal_state(&self, method: &str, called: &str, asked: &Asked) -> String {
        self.context
            .states
            .seal(&self.identity, method, called, asked)
    }

    /// A retry of a forwarded `method` on `called` (`prompts/get` of a name, `resources/read`
    /// of a URI): its sealed `requestState` in `params` opened and replaced by the provider's
    /// own (or taken out, when the provider gave none); an error when it does not verify.
    pub(crate) fn open_params(
        &self,
        params: &mut Value,
        method: &str,
        called: &str,
    ) -> Result<(), McpError> {
        let Some(members) = params.as_object_mut() else {
            return Ok(());
        };
        let Some(sealed) = members.remove("requestState") else {
            return Ok(());
        };
        let asked = self.open_state(method, called, sealed.as_str().unwrap_or_default())?;
        if let Some(state) = asked.state {
            members.insert("requestState".into(), Value::String(state));
        }
        Ok(())
    }

    /// A provider's answer to a forwarded `method` on `called`: an `input_required` one has
    /// its `requestState` sealed for this caller's retry.
    pub(crate) fn seal_answer(&self, mut answer: Value, method: &str, called: &str) -> Value {
        if answer.get("resultType").and_then(Value::as_str) == Some("input_required")
            && let Some(members) = answer.as_object_mut()
        {
            let state = members
                .remove("requestState")
                .and_then(|s| s.as_str().map(str::to_owned));
            let asked = Asked {
                by: called.to_owned(),
                state,
            };
            let sealed = self.seal_state(method, called, &asked);
            members.insert("requestState".into(), Value::String(sealed));
        }
        answer
    }
}
