//! The record of every request the provider receives, which `GET /debug/requests` returns:
//! method, path and headers, and for an MCP POST the JSON-RPC methods and tools it names.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::request::Parts;
use serde::Serialize;

/// Largest MCP request body the provider reads to record it: far above any test's call.
pub(crate) const MAX_RECORDED_BODY: usize = 16 * 1024 * 1024;

/// One recorded HTTP request.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Recorded {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    /// The JSON-RPC messages of an MCP POST: method, and the tool of a `tools/call`.
    rpc: Vec<RpcMessage>,
}

impl Recorded {
    /// The record of the request with these `parts`, whose body held the messages `rpc`.
    pub(crate) fn new(parts: &Parts, rpc: Vec<RpcMessage>) -> Self {
        Self {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            headers: parts
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            rpc,
        }
    }
}

/// What one JSON-RPC message asked for.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RpcMessage {
    method: Option<String>,
    /// The tool a `tools/call` names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool: Option<String>,
}

impl RpcMessage {
    /// The messages of a body (one message or a batch); nothing for a body that is not JSON.
    fn read(body: &[u8]) -> Vec<Self> {
        let one = |message: &serde_json::Value| Self {
            method: message["method"].as_str().map(str::to_owned),
            tool: (message["method"] == "tools/call")
                .then(|| message["params"]["name"].as_str().map(str::to_owned))
                .flatten(),
        };
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(serde_json::Value::Array(batch)) => batch.iter().map(one).collect(),
            Ok(message) => vec![one(&message)],
            Err(_) => Vec::new(),
        }
    }
}

/// Reads an MCP POST's `body` whole for the JSON-RPC messages it holds, and gives it back to be
/// passed on; `None` when it is over [`MAX_RECORDED_BODY`].
pub(crate) async fn read_rpc(body: Body) -> Option<(Body, Vec<RpcMessage>)> {
    let bytes = axum::body::to_bytes(body, MAX_RECORDED_BODY).await.ok()?;
    let rpc = RpcMessage::read(&bytes);
    Some((Body::from(bytes), rpc))
}
