//! The `requestState` of a provider's `input_required` result as the caller holds it
//! (docs/mcp-surface.md "A provider's questions in 2026-07-28").
//!
//! A 2026-07-28 caller answers a question by sending the request again with its answers and the
//! `requestState` it was given. Capstan never hands a caller a provider's state as it is: it
//! seals it (rmcp's `RequestStateCodec`: HMAC-SHA256 with a per-process key, a TTL) together
//! with who asked — the composed tool, prompt or resource that answered — bound to the caller
//! (its project and token digest) and to what the caller called (the tool, `cap__*` name,
//! prompt or URI). A retry whose state fails verification — tampered, another caller's,
//! another capability's, expired, or from before a restart — is refused with a JSON-RPC error
//! and reaches no provider; one that verifies goes to the provider that asked, with that
//! provider's own state. So a routed call's retry is bound to its capability and candidate, and
//! a provider never sees another provider's state or the answers meant for it.

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::caller::identity::Identity;

/// How long a sealed state may be answered: a person may take a while over a question, and a
/// task lives an hour at most by default (`maxTaskDurationSeconds` bounds it further).
pub const QUESTION_TTL: Duration = Duration::from_secs(3600);

/// Who asked, and what it asked with: the sealed payload.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, Serialize)]
pub struct Asked {
    /// The composed tool (for a routed call, the candidate that answered), prompt or URI.
    pub by: String,
    /// The provider's own `requestState`, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// Seals and opens the states the sidecar hands its callers.
pub struct RequestStates {
    /// `None` when the operating system gave no randomness for a key: a known key would let
    /// anyone forge states, so none is sealed and every retry is refused (fail closed).
    codec: Option<RequestStateCodec>,
}

impl std::fmt::Debug for RequestStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestStates")
    }
}

impl RequestStates {
    /// States sealed with a key drawn for this process: a restart makes every earlier state
    /// fail verification (the caller calls again without one).
    pub fn new() -> Self {
        let mut key = [0u8; RequestStateCodec::MIN_KEY_LENGTH];
        let codec = match getrandom::fill(&mut key) {
            // The key is exactly the codec's minimum length, so it is never refused.
            Ok(()) => RequestStateCodec::try_new(key.to_vec()).ok(),
            Err(error) => {
                tracing::error!(%error, "no randomness for the requestState key: every retry with a requestState will be refused");
                None
            }
        };
        Self { codec }
    }

    /// `asked`, sealed for `caller`'s retry of `method` on `called`.
    pub fn seal(&self, caller: &Identity, method: &str, called: &str, asked: &Asked) -> String {
        let bound = bound_to(caller, method, called);
        let options = SealOptions::new().associated_data(&bound).ttl(QUESTION_TTL);
        // Serializing two strings cannot fail; an empty payload would only fail to open.
        let payload = serde_json::to_vec(asked).unwrap_or_default();
        match &self.codec {
            Some(codec) => codec.seal_with(&payload, &options),
            None => String::new(),
        }
    }

    /// What `sealed` says was asked, if it was sealed by this process for `caller`'s retry of
    /// `method` on `called` and has not expired; otherwise the JSON-RPC error that refuses it.
    pub fn open(
        &self,
        caller: &Identity,
        method: &str,
        called: &str,
        sealed: &str,
    ) -> Result<Asked, McpError> {
        let bound = bound_to(caller, method, called);
        self.codec
            .as_ref()
            .and_then(|codec| codec.open_with(sealed, &bound).ok())
            .and_then(|payload| serde_json::from_slice::<Asked>(&payload).ok())
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!(
                        "requestState failed integrity verification: it was not given to this \
                         caller for this {method} of {called:?} by this sidecar, or it expired; \
                         call again without inputResponses and requestState"
                    ),
                    Some(json!({"kind": "rejected", "field": "requestState", "retryable": false})),
                )
            })
    }
}

impl Default for RequestStates {
    fn default() -> Self {
        Self::new()
    }
}

/// The associated data a state is sealed with: the caller (project and token digest), the
/// method and what it called.
fn bound_to(caller: &Identity, method: &str, called: &str) -> Vec<u8> {
    let mut bound = caller.fingerprint().to_vec();
    for part in [method, called] {
        bound.push(0);
        bound.extend_from_slice(part.as_bytes());
    }
    bound
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn asked() -> Asked {
        Asked {
            by: "issues__create_issue".into(),
            state: Some("provider-state".into()),
        }
    }

    #[test]
    fn a_state_should_open_only_for_its_caller_method_and_name() {
        let states = RequestStates::new();
        let alice = Identity::new("demo".into(), Some("alice"));
        let sealed = states.seal(&alice, "tools/call", "cap__issue_create", &asked());
        assert_eq!(
            states
                .open(&alice, "tools/call", "cap__issue_create", &sealed)
                .unwrap(),
            asked()
        );
        let bob = Identity::new("demo".into(), Some("bob"));
        let other_project = Identity::new("other".into(), Some("alice"));
        for (caller, method, called) in [
            (&bob, "tools/call", "cap__issue_create"),
            (&other_project, "tools/call", "cap__issue_create"),
            (&alice, "tools/call", "cap__web_search"),
            (&alice, "prompts/get", "cap__issue_create"),
        ] {
            let refused = states.open(caller, method, called, &sealed).unwrap_err();
            assert_eq!(refused.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert_eq!(refused.data.unwrap()["field"], "requestState");
        }
    }

    #[test]
    fn a_tampered_or_foreign_state_should_not_open() {
        let states = RequestStates::new();
        let alice = Identity::new("demo".into(), Some("alice"));
        let sealed = states.seal(&alice, "tools/call", "t", &asked());
        let mut flipped = sealed.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        for forged in [
            format!("{sealed}-TAMPERED"),
            String::from_utf8(flipped).unwrap(),
            "provider-state".to_owned(),
            String::new(),
            RequestStates::new().seal(&alice, "tools/call", "t", &asked()),
        ] {
            assert!(
                states.open(&alice, "tools/call", "t", &forged).is_err(),
                "{forged}"
            );
        }
    }
}
