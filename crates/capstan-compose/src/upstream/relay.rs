//! A call's own traffic between the caller and the provider: the caller's `_meta` going up,
//! the provider's progress and log messages about the call coming back, mapped through
//! Capstan's own ids (docs/mcp-surface.md).
//!
//! The provider never sees the caller's progress token: it gets one Capstan mints for the call
//! (unique on the upstream session, like the request id), and only a progress notification
//! carrying that token is relayed — rewritten to the caller's token —, so a provider cannot
//! address another caller's call, or another call of the same caller. Log messages
//! (`notifications/message`) sent on the call's stream are relayed as they are. A request the
//! provider sends the caller on the call's stream (`sampling/createMessage`,
//! `elicitation/create`, `roots/list`) is answered at once with an error: the call goes on,
//! and nothing waits for an answer that would never come.

use rmcp::model::{ProgressToken, RequestMetaObject, ServerNotification};
use serde_json::{Value, json};

/// Where the provider's messages about one call go: the caller's side of the call (the
/// sidecar turns them into events on the caller's stream). Bounded: a caller that reads
/// slowly slows the reading of the provider's stream, never the sidecar's memory.
pub type Notifications = tokio::sync::mpsc::Sender<ServerNotification>;

/// Request `_meta` members of the 2026-07-28 revision that describe the connection the request
/// came on, not the request: never forwarded to a provider.
const CONNECTION_MEMBERS: &[&str] = &[
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/clientCapabilities",
];

/// How many relayed messages may wait for the caller's side of one call.
pub const RELAY_CAPACITY: usize = 64;

/// What a call carries besides its tool and arguments: the caller's `_meta`, and where the
/// provider's messages about the call go (none: they are read and dropped).
#[derive(Debug, Default)]
pub struct CallTraffic {
    /// The caller's request `_meta`, forwarded with its progress token replaced.
    pub meta: Option<RequestMetaObject>,
    /// The caller's side of the call.
    pub notifications: Option<Notifications>,
}

impl CallTraffic {
    /// Traffic with the caller's `_meta` and side.
    pub fn new(meta: Option<RequestMetaObject>, notifications: Option<Notifications>) -> Self {
        Self {
            meta,
            notifications,
        }
    }

    /// The caller's progress token, if it asked for progress.
    fn caller_token(&self) -> Option<ProgressToken> {
        self.meta.as_ref()?.get_progress_token()
    }

    /// The `_meta` sent to the provider: the caller's members, its progress token replaced by
    /// `minted` — or left out when the caller asked for no progress —, without the members
    /// that describe the caller's own connection to Capstan (its revision, client and
    /// capabilities: the provider's session has its own).
    pub(crate) fn upstream_meta(&self, minted: &str) -> Option<Value> {
        let meta = self.meta.as_ref()?;
        let mut members = meta.0.0.clone();
        for connection in CONNECTION_MEMBERS {
            members.remove(*connection);
        }
        let asked = members.remove("progressToken").is_some();
        if asked {
            members.insert("progressToken".into(), Value::String(minted.to_owned()));
        }
        (!members.is_empty()).then_some(Value::Object(members))
    }

    /// What to do with `message`, a message on the call's stream that is not its answer.
    pub(crate) async fn relay(&self, message: &Value, minted: &str) -> Relayed {
        if is_request(message) {
            return Relayed::Refuse(refusal(message));
        }
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            return Relayed::Dropped;
        };
        let outgoing = match method {
            "notifications/progress" => {
                let ours = message["params"]["progressToken"].as_str() == Some(minted);
                let Some(token) = self.caller_token().filter(|_| ours) else {
                    return Relayed::Dropped;
                };
                let mut rewritten = message.clone();
                rewritten["params"]["progressToken"] =
                    serde_json::to_value(&token).unwrap_or(Value::Null);
                rewritten
            }
            "notifications/message" => message.clone(),
            _ => return Relayed::Dropped,
        };
        let (Some(sink), Ok(notification)) = (
            &self.notifications,
            serde_json::from_value::<ServerNotification>(outgoing),
        ) else {
            return Relayed::Dropped;
        };
        // A caller that went away is not an error of the call.
        let _ = sink.send(notification).await;
        Relayed::Sent
    }
}

/// What became of one message on a call's stream.
#[derive(Debug, PartialEq)]
pub(crate) enum Relayed {
    /// Handed to the caller's side.
    Sent,
    /// Not for the caller (another call's progress, a kind not relayed, no caller side).
    Dropped,
    /// A request of the provider's, to be answered with this error response.
    Refuse(Value),
}

/// Whether `message` is a JSON-RPC request (a method and an id).
fn is_request(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_some_and(|id| !id.is_null())
}

/// The error response to a provider's request the caller cannot be asked: "method not found",
/// as a client without the capability answers it.
fn refusal(request: &Value) -> Value {
    let method = request["method"].as_str().unwrap_or("");
    json!({
        "jsonrpc": "2.0",
        "id": request["id"],
        "error": {
            "code": -32601,
            "message": format!(
                "{method} is not available: the client behind Capstan cannot be asked during \
                 this call"
            ),
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn traffic(meta: Value) -> (CallTraffic, tokio::sync::mpsc::Receiver<ServerNotification>) {
        let (sink, receiver) = tokio::sync::mpsc::channel(RELAY_CAPACITY);
        let meta = serde_json::from_value::<RequestMetaObject>(meta).unwrap();
        (CallTraffic::new(Some(meta), Some(sink)), receiver)
    }

    #[test]
    fn the_provider_should_see_a_minted_token_and_every_other_member() {
        let (traffic, _) = traffic(json!({
            "progressToken": 7,
            "traceparent": "00-ab-cd-01",
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }));
        assert_eq!(
            traffic.upstream_meta("capstan-3"),
            Some(json!({"progressToken": "capstan-3", "traceparent": "00-ab-cd-01"}))
        );
        let (no_progress, _) = traffic_without_token();
        assert_eq!(
            no_progress.upstream_meta("capstan-3"),
            Some(json!({"traceparent": "00-ab-cd-01"}))
        );
        assert_eq!(CallTraffic::default().upstream_meta("capstan-3"), None);
    }

    fn traffic_without_token() -> (CallTraffic, tokio::sync::mpsc::Receiver<ServerNotification>) {
        traffic(json!({"traceparent": "00-ab-cd-01"}))
    }

    #[tokio::test]
    async fn only_progress_on_the_minted_token_should_reach_the_caller_under_its_own_token() {
        let (traffic, mut receiver) = traffic(json!({"progressToken": "caller-token"}));
        let progress = |token: &str| {
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": token, "progress": 1, "total": 3}})
        };
        assert_eq!(
            traffic.relay(&progress("someone-else"), "capstan-9").await,
            Relayed::Dropped
        );
        assert_eq!(
            traffic.relay(&progress("capstan-9"), "capstan-9").await,
            Relayed::Sent
        );
        let sent = serde_json::to_value(receiver.try_recv().unwrap()).unwrap();
        assert_eq!(sent["params"]["progressToken"], "caller-token");
        assert_eq!(sent["params"]["progress"], 1.0);
        assert!(receiver.try_recv().is_err(), "one message relayed, not two");
    }

    #[tokio::test]
    async fn a_providers_request_should_be_refused_at_once_with_its_own_id() {
        let (traffic, mut receiver) = traffic(json!({}));
        let request = json!({"jsonrpc": "2.0", "id": 41, "method": "elicitation/create",
                             "params": {"message": "?", "requestedSchema": {}}});
        let Relayed::Refuse(answer) = traffic.relay(&request, "capstan-1").await else {
            panic!("not refused");
        };
        assert_eq!(answer["id"], 41);
        assert_eq!(answer["error"]["code"], -32601);
        assert!(receiver.try_recv().is_err());
    }
}
