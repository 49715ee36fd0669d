//! Reading a direct request's answer: a JSON body, or the SSE stream up to the response with
//! the request's id, the provider's other messages on it passed on (`mcp/relay.rs`).
//!
//! An answer is read into [`Answer`]: its `result` kept as the provider's text, parsed once
//! into the type its request expects (a tool result, a tool list), with no `Value` tree
//! between — the tree and the typed result made from it would be ~5 % of the sidecar's
//! instructions per forwarded call.

use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use sse_stream::SseStream;

use super::{DirectCalls, MAX_ANSWER_BYTES};
use crate::mcp::changes::is_list_changed;
use crate::mcp::drain::DrainOnDrop;
use crate::mcp::error::CallError;
use crate::mcp::limited::{limited_bytes, read_limited};
use crate::mcp::relay::{CallTraffic, Relayed, is_request};
use capstan_core::error_chain::chain_text;

/// A JSON-RPC message of the provider's read as an answer: its id, its `result` as text, its
/// `error` (rare) as a `Value`. Other members are not read (a member named twice is an error,
/// as for any derived type). On a stream, a message whose id is not the request's is parsed
/// whole afterwards (progress, logs, a changed list: rarer than answers).
#[derive(Debug, Deserialize)]
pub(crate) struct Answer {
    #[serde(default)]
    pub(crate) id: Option<Value>,
    #[serde(default)]
    pub(crate) result: Option<Box<RawValue>>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

impl DirectCalls {
    /// The JSON-RPC answer with id `id`: the JSON body, or read from the SSE stream.
    /// A session the server no longer knows is unavailable.
    pub(super) async fn answer<B>(
        &self,
        response: http::Response<B>,
        id: &str,
        traffic: &CallTraffic,
    ) -> Result<Answer, CallError>
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + Unpin + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let status = response.status();
        if status == http::StatusCode::NOT_FOUND {
            return Err(
                self.unavailable("the server no longer knows this session (HTTP 404)".into())
            );
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
        match content_type.as_str() {
            "application/json" => {
                let body = read_limited(response, MAX_ANSWER_BYTES)
                    .await
                    .map_err(|e| self.unavailable(chain_text(&e)))?;
                serde_json::from_slice::<Answer>(&body)
                    .map_err(|e| self.malformed(format!("the answer is not JSON: {e}")))
            }
            "text/event-stream" if status.is_success() => {
                self.answer_in_stream(response, id, traffic).await
            }
            _ if status.is_success() => {
                Err(self.malformed(format!("unexpected content type {content_type:?}")))
            }
            _ => Err(self.unavailable(format!("HTTP {status}"))),
        }
    }

    /// Reads the response stream up to the message with id `id`. The provider's progress and
    /// log messages about the request go to `traffic`, its requests are refused at once
    /// (`mcp/relay.rs`), and a changed tool list is noted, whichever stream it arrives on.
    async fn answer_in_stream<B>(
        &self,
        response: http::Response<B>,
        id: &str,
        traffic: &CallTraffic,
    ) -> Result<Answer, CallError>
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let bytes = limited_bytes(response, MAX_ANSWER_BYTES);
        // Given up before its answer, a 2026-07-28 request's stream is closed: that is how the
        // revision cancels a request. Otherwise it is read to its end for the connection's sake.
        let stateless = self.target.revision.is_stateless();
        let mut events = DrainOnDrop::new(SseStream::from_bytes_stream(bytes).boxed());
        events.drain(!stateless);
        loop {
            let Some(event) = events.next().await else {
                return Err(self.malformed("the response stream ended without an answer".into()));
            };
            let event = event.map_err(|e| self.unavailable(chain_text(&e)))?;
            let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                continue;
            };
            let not_json =
                |e: serde_json::Error| self.malformed(format!("an event is not JSON: {e}"));
            let answer = serde_json::from_str::<Answer>(&data).map_err(not_json)?;
            if answer.id.as_ref().and_then(Value::as_str) == Some(id) {
                events.drain(true);
                return Ok(answer);
            }
            let message = serde_json::from_str::<Value>(&data).map_err(not_json)?;
            if is_list_changed(&message) {
                if let Some(changes) = &self.changes {
                    changes.note();
                }
                continue;
            }
            // A question nothing could answer (a 2026-07-28 server without a session asks
            // through an `input_required` result, not mid-call): the call is given up now,
            // rather than the person asked and the call left waiting for its time limit.
            if is_request(&message) && !self.target.revision.answerable() {
                return Err(self.malformed(format!(
                    "it asked {} mid-call, which its revision ({}) gives no way to answer \
                     without a session; it should ask with an input_required result",
                    message["method"].as_str().unwrap_or("something"),
                    self.target.revision.version()
                )));
            }
            // Boxed, as the rarer turns of a call's stream: every call's future would
            // otherwise be as large as theirs.
            match Box::pin(traffic.relay(&message, id)).await {
                Relayed::Answer(answer) => Box::pin(self.post_answer(&answer)).await,
                // Given up: dropping the call cancels it at the provider.
                Relayed::Unanswered { method, waited } => {
                    return Err(CallError::Unanswered {
                        server: self.server.clone(),
                        method,
                        waited,
                    });
                }
                Relayed::Sent | Relayed::Dropped => {}
            }
        }
    }
}
