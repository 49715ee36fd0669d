//! `tools/call` straight to the upstream: one POST in the caller's own task on the session rmcp
//! opened, the answer read as JSON or from the SSE stream up to the response with this
//! request's id.
//!
//! rmcp's client routes every request through its service loop, its transport worker and a task
//! per response stream, and back; the sidecar benchmark's profile was dominated by those task
//! switches, and this path cut a forwarded call's latency by a third. rmcp opens the session
//! (initialize, tools/list) and then lets go of it (`upstream.rs`); the calls and the closing
//! DELETE are sent from here. Hand-written because rmcp offers no call that skips its worker,
//! and keeping its client alive only to send the DELETE cost most of a session's memory; it
//! applies the same limits rmcp does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use capstan_api::wire::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use futures::StreamExt;
use rmcp::model::{CallToolResult, ErrorCode, JsonObject};
use serde_json::{Value, json};
use sse_stream::SseStream;
use thiserror::Error;

use crate::call_error::CallError;
use crate::errors::chain_text;
use crate::pooled::DrainOnDrop;

/// What a tool call needs to go straight to the server: the shared HTTP client, the endpoint,
/// and the session rmcp negotiated.
pub(crate) struct DirectCalls {
    /// The `mcpServers[].name` entry, for errors.
    pub(crate) server: String,
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
    pub(crate) session: String,
    pub(crate) version: String,
    pub(crate) next_id: AtomicU64,
}

impl DirectCalls {
    /// One `tools/call` POSTed in the caller's own task on the session rmcp opened.
    ///
    /// rmcp's client routes every request through its service loop, its transport worker and
    /// a task per response stream, and back (the sidecar benchmark's profile was dominated by
    /// those task switches; this path cut the forwarded call's latency by a third). The
    /// session's lifecycle — initialize, tools/list, DELETE — stays with rmcp; this sends one
    /// request and reads its answer (JSON, or the SSE stream up to the response with this
    /// request's id), under the same limits rmcp applies.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, CallError> {
        let unavailable = |message: String| CallError::Unavailable {
            server: self.server.clone(),
            message,
        };
        let malformed = |message: String| CallError::Malformed {
            server: self.server.clone(),
            message,
        };
        let id = format!("capstan-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": { "name": tool, "arguments": arguments.unwrap_or_default() },
        });
        let response = self
            .http
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(MCP_SESSION_ID, &self.session)
            .header(MCP_PROTOCOL_VERSION, &self.version)
            .body(serde_json::to_vec(&request).unwrap_or_default())
            .send()
            .await
            .map_err(|error| unavailable(chain_text(&error)))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(unavailable(
                "the server no longer knows this session (HTTP 404)".into(),
            ));
        }
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        let mut answer = match content_type.as_str() {
            "application/json" => {
                let body = read_limited(response, MAX_ANSWER_BYTES)
                    .await
                    .map_err(|e| unavailable(chain_text(&e)))?;
                serde_json::from_slice::<Value>(&body)
                    .map_err(|e| malformed(format!("the answer is not JSON: {e}")))?
            }
            "text/event-stream" if status.is_success() => {
                let mut size = 0usize;
                let bytes = response.bytes_stream().map(move |chunk| {
                    let chunk = chunk?;
                    size += chunk.len();
                    if size > MAX_ANSWER_BYTES {
                        return Err(ReadError::TooLarge);
                    }
                    Ok(chunk)
                });
                let mut events = DrainOnDrop::new(SseStream::from_bytes_stream(bytes).boxed());
                loop {
                    let Some(event) = events.next().await else {
                        return Err(malformed(
                            "the response stream ended without an answer".into(),
                        ));
                    };
                    let event = event.map_err(|e| unavailable(chain_text(&e)))?;
                    let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                        continue;
                    };
                    let message = serde_json::from_str::<Value>(&data)
                        .map_err(|e| malformed(format!("an event is not JSON: {e}")))?;
                    // Notifications (progress, logs) are not forwarded.
                    if message.get("id") == Some(&Value::String(id.clone())) {
                        break message;
                    }
                }
            }
            _ => {
                return Err(if status.is_success() {
                    malformed(format!("unexpected content type {content_type:?}"))
                } else {
                    unavailable(format!("HTTP {status}"))
                });
            }
        };
        if let Some(error) = answer.get("error") {
            let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            return Err(if code == i64::from(ErrorCode::INVALID_PARAMS.0) {
                CallError::InvalidInput {
                    server: self.server.clone(),
                    tool: tool.to_owned(),
                    message,
                }
            } else {
                unavailable(format!("error {code}: {message}"))
            });
        }
        let Some(result) = answer.get_mut("result").map(Value::take) else {
            return Err(malformed(
                "the answer to tools/call has neither a result nor an error".into(),
            ));
        };
        serde_json::from_value::<CallToolResult>(result)
            .map_err(|_| malformed("the answer to tools/call is not a tool result".into()))
    }
}

impl DirectCalls {
    /// Ends the session: a DELETE, answered or not within [`END_TIMEOUT`]. A server that does
    /// not let clients end sessions answers 405, which is fine: it ends them itself.
    pub(crate) async fn end(&self) {
        self.ending().await;
    }

    /// The DELETE ending the session, owning what it needs (for a task of its own).
    pub(crate) fn ending(&self) -> impl Future<Output = ()> + Send + 'static {
        let request = self
            .http
            .delete(&self.url)
            .header(MCP_SESSION_ID, &self.session)
            .header(MCP_PROTOCOL_VERSION, &self.version)
            .timeout(END_TIMEOUT);
        async move {
            // Read to the end, so that the connection goes back to the pool.
            if let Ok(response) = request.send().await {
                let _ = response.bytes().await;
            }
        }
    }
}

/// How long the DELETE ending a session may take.
const END_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer a direct call reads: rmcp's own limit for a JSON response.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Why an answer could not be read.
#[derive(Debug, Error)]
enum ReadError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("the answer exceeds {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
}

async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
