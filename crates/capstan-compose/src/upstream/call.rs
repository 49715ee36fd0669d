//! `tools/call` (and a re-list with `tools/list`) straight to the upstream: one POST in the
//! caller's own task on the session rmcp opened, the answer read as JSON or from the SSE
//! stream up to the response with this request's id.
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
use rmcp::model::{CallToolResult, ErrorCode, ErrorData, JsonObject, ListToolsResult, Tool};
use serde_json::{Value, json};
use sse_stream::SseStream;
use thiserror::Error;
use tracing::debug;

use super::Forwarded;
use super::changes::{ResourceUpdated, UpstreamChanges, is_list_changed, updated_uri};
use super::error::CallError;
use super::pooled::DrainOnDrop;
use super::relay::{CallTraffic, Relayed};
use crate::error_chain::chain_text;

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
    /// Where the server's list changes (on a call's stream, or its standalone stream) are
    /// noted, for a server followed for them.
    pub(crate) changes: Option<UpstreamChanges>,
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
    ///
    /// The caller's `_meta` goes with it (its progress token replaced by this request's id);
    /// the provider's messages about the call on its stream go to `traffic`
    /// (`upstream/relay.rs`).
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        traffic: &CallTraffic,
    ) -> Result<CallToolResult, CallError> {
        let id = self.next_request_id();
        let mut params = json!({ "name": tool, "arguments": arguments.unwrap_or_default() });
        if let Some(meta) = traffic.upstream_meta(&id) {
            params["_meta"] = meta;
        }
        // A call given up before its answer (the caller cancelled it, or its time ran out) is
        // cancelled at the provider too.
        let abandoned = Abandoned {
            calls: self,
            id: &id,
        };
        let answer = self
            .request_as(&id, "tools/call", params, Some(tool), traffic)
            .await;
        std::mem::forget(abandoned);
        let result = answer?;
        serde_json::from_value::<CallToolResult>(result).map_err(|_| CallError::Malformed {
            server: self.server.clone(),
            message: "the answer to tools/call is not a tool result".into(),
        })
    }

    /// `logging/setLevel` on the session.
    pub(crate) async fn set_log_level(&self, params: Value) -> Result<(), CallError> {
        self.request("logging/setLevel", params, None)
            .await
            .map(drop)
    }

    /// One request of the caller's on the session: the provider's `result`, or its error
    /// answer as it gave it.
    pub(crate) async fn forward(&self, method: &str, params: Value) -> Result<Value, Forwarded> {
        let id = self.next_request_id();
        let response = self
            .send(&id, method, params)
            .await
            .map_err(Forwarded::Failed)?;
        let mut answer = self
            .answer(response, &id, &CallTraffic::default())
            .await
            .map_err(Forwarded::Failed)?;
        if let Some(error) = answer.get_mut("error") {
            return match serde_json::from_value::<ErrorData>(error.take()) {
                Ok(error) => Err(Forwarded::Refused(error)),
                Err(e) => Err(Forwarded::Failed(
                    self.malformed(format!("an error answer that is not one: {e}")),
                )),
            };
        }
        answer.get_mut("result").map(Value::take).ok_or_else(|| {
            Forwarded::Failed(self.malformed(format!(
                "the answer to {method} has neither a result nor an error"
            )))
        })
    }

    /// The server's tools, listed again on the session (every page): after the server said
    /// its list changed, without opening a new session.
    pub(crate) async fn list_tools(&self) -> Result<Vec<Tool>, CallError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        // A server that pages forever is cut off: far more tools than any allow-list names.
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let result = self.request("tools/list", params, None).await?;
            let page = serde_json::from_value::<ListToolsResult>(result).map_err(|_| {
                CallError::Malformed {
                    server: self.server.clone(),
                    message: "the answer to tools/list is not a tool list".into(),
                }
            })?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if !next.is_empty() => cursor = Some(next),
                _ => return Ok(tools),
            }
        }
        Err(CallError::Malformed {
            server: self.server.clone(),
            message: format!("tools/list went on for more than {MAX_LIST_PAGES} pages"),
        })
    }

    /// One request on the session and its `result`; an error answer is `invalid_input` when it
    /// is about the parameters of `tool`, else unavailable.
    async fn request(
        &self,
        method: &str,
        params: Value,
        tool: Option<&str>,
    ) -> Result<Value, CallError> {
        let id = self.next_request_id();
        self.request_as(&id, method, params, tool, &CallTraffic::default())
            .await
    }

    /// The next request id on the session; a call's minted progress token is the same string.
    fn next_request_id(&self) -> String {
        format!("capstan-{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// [`Self::request`] with id `id`, the provider's other messages on its stream going to
    /// `traffic`.
    async fn request_as(
        &self,
        id: &str,
        method: &str,
        params: Value,
        tool: Option<&str>,
        traffic: &CallTraffic,
    ) -> Result<Value, CallError> {
        let response = self.send(id, method, params).await?;
        let answer = self.answer(response, id, traffic).await?;
        self.result_of(answer, method, tool)
    }

    /// POSTs the request on the session; a session the server no longer knows is unavailable.
    async fn send(
        &self,
        id: &str,
        method: &str,
        params: Value,
    ) -> Result<reqwest::Response, CallError> {
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": method,
            "params": params,
        });
        let response = self
            .post(&request)
            .send()
            .await
            .map_err(|error| self.unavailable(chain_text(&error)))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(
                self.unavailable("the server no longer knows this session (HTTP 404)".into())
            );
        }
        Ok(response)
    }

    /// The JSON-RPC answer with id `id`: the JSON body, or read from the SSE stream.
    async fn answer(
        &self,
        response: reqwest::Response,
        id: &str,
        traffic: &CallTraffic,
    ) -> Result<Value, CallError> {
        let status = response.status();
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
                serde_json::from_slice::<Value>(&body)
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
    /// (`upstream/relay.rs`), and a changed tool list is noted, whichever stream it arrives on.
    async fn answer_in_stream(
        &self,
        response: reqwest::Response,
        id: &str,
        traffic: &CallTraffic,
    ) -> Result<Value, CallError> {
        let bytes = limited_bytes(response, MAX_ANSWER_BYTES);
        let mut events = DrainOnDrop::new(SseStream::from_bytes_stream(bytes).boxed());
        loop {
            let Some(event) = events.next().await else {
                return Err(self.malformed("the response stream ended without an answer".into()));
            };
            let event = event.map_err(|e| self.unavailable(chain_text(&e)))?;
            let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                continue;
            };
            let message = serde_json::from_str::<Value>(&data)
                .map_err(|e| self.malformed(format!("an event is not JSON: {e}")))?;
            if message.get("id").and_then(Value::as_str) == Some(id) {
                return Ok(message);
            }
            if is_list_changed(&message) {
                if let Some(changes) = &self.changes {
                    changes.note();
                }
                continue;
            }
            if let Relayed::Answer(answer) = traffic.relay(&message, id).await {
                self.post_answer(&answer).await;
            }
        }
    }

    /// POSTs a JSON-RPC response to a request of the provider's on the session. The provider
    /// answers 202; a failure only means the provider waits for its own timeout, which is not
    /// this call's error.
    async fn post_answer(&self, answer: &Value) {
        self.posting(answer).await;
    }

    /// A POST of `message` on the session.
    fn post(&self, message: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(MCP_SESSION_ID, &self.session)
            .header(MCP_PROTOCOL_VERSION, &self.version)
            .body(serde_json::to_vec(message).unwrap_or_default())
    }

    /// POSTs `message` (a response or a notification: the provider answers 202) on the session,
    /// owning what it needs (for a task of its own). Undelivered is only logged.
    fn posting(&self, message: &Value) -> impl Future<Output = ()> + Send + 'static {
        let request = self.post(message).timeout(END_TIMEOUT);
        let server = self.server.clone();
        async move {
            match request.send().await {
                // Read to the end, so that the connection goes back to the pool.
                Ok(response) => {
                    let _ = response.bytes().await;
                }
                Err(error) => {
                    debug!(%server, error = %chain_text(&error), "a message to the server was not delivered");
                }
            }
        }
    }

    /// The `result` of `answer`; an error answer is `invalid_input` when it is about the
    /// parameters of `tool`, else unavailable.
    fn result_of(
        &self,
        mut answer: Value,
        method: &str,
        tool: Option<&str>,
    ) -> Result<Value, CallError> {
        if let Some(error) = answer.get("error") {
            let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            return Err(match tool {
                Some(tool) if code == i64::from(ErrorCode::INVALID_PARAMS.0) => {
                    CallError::InvalidInput {
                        server: self.server.clone(),
                        tool: tool.to_owned(),
                        message,
                    }
                }
                _ => self.unavailable(format!("error {code}: {message}")),
            });
        }
        answer.get_mut("result").map(Value::take).ok_or_else(|| {
            self.malformed(format!(
                "the answer to {method} has neither a result nor an error"
            ))
        })
    }

    fn unavailable(&self, message: String) -> CallError {
        CallError::Unavailable {
            server: self.server.clone(),
            message,
        }
    }

    fn malformed(&self, message: String) -> CallError {
        CallError::Malformed {
            server: self.server.clone(),
            message,
        }
    }
}

/// A `tools/call` in flight on a session: dropped before its answer, it tells the provider
/// with `notifications/cancelled` (sent from a task of its own, bounded by [`END_TIMEOUT`]).
struct Abandoned<'a> {
    calls: &'a DirectCalls,
    id: &'a str,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let notification = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {
                "requestId": self.id,
                "reason": "the call was given up: its caller cancelled it or its time ran out",
            },
        });
        runtime.spawn(self.calls.posting(&notification));
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

impl DirectCalls {
    /// Follows the server's standalone stream (GET on the session) for as long as it is
    /// polled, noting each list change in `changes` and passing on each
    /// `notifications/resources/updated` (as coming from upstream `upstream`); other messages
    /// are read and dropped. A stream that ends or fails is opened again after a pause that grows
    /// to [`LISTEN_MAX_PAUSE`], and what the server said in between counts as missed (its lists
    /// re-read, every subscription told); a server that offers no stream (405) is not asked again. Each
    /// connection reads at most [`LISTEN_MAX_BYTES`], so a server cannot make the sidecar
    /// buffer without bound.
    pub(crate) fn listen(
        &self,
        changes: UpstreamChanges,
        upstream: u64,
    ) -> impl Future<Output = ()> + Send + 'static {
        let request = self
            .http
            .get(&self.url)
            .header(http::header::ACCEPT, "text/event-stream")
            .header(MCP_SESSION_ID, &self.session)
            .header(MCP_PROTOCOL_VERSION, &self.version);
        let server = self.server.clone();
        async move {
            let mut pause = LISTEN_FIRST_PAUSE;
            // Whether a stream was open before: what the server said between that stream's end
            // and this one's start was not heard, so reopening notes it as missed.
            let mut reopened = false;
            loop {
                let Some(request) = request.try_clone() else {
                    return;
                };
                match request.send().await {
                    Ok(response)
                        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED =>
                    {
                        debug!(%server, "the server offers no standalone stream");
                        return;
                    }
                    Ok(response) if response.status().is_success() => {
                        pause = LISTEN_FIRST_PAUSE;
                        if std::mem::replace(&mut reopened, true) {
                            debug!(%server, "the standalone stream was reopened; what it said meanwhile was missed");
                            changes.missed();
                        }
                        let bytes = limited_bytes(response, LISTEN_MAX_BYTES);
                        let mut events = std::pin::pin!(SseStream::from_bytes_stream(bytes));
                        while let Some(Ok(event)) = events.next().await {
                            let message = event
                                .data
                                .and_then(|data| serde_json::from_str::<Value>(&data).ok());
                            let Some(message) = message else { continue };
                            if is_list_changed(&message) {
                                debug!(%server, "a list of the server's changed");
                                changes.note();
                            } else if let Some(uri) = updated_uri(&message) {
                                changes.updated(ResourceUpdated {
                                    upstream,
                                    uri: uri.to_owned(),
                                });
                            }
                        }
                    }
                    Ok(response) => {
                        debug!(%server, status = %response.status(), "the standalone stream was refused");
                    }
                    Err(error) => {
                        debug!(%server, error = %chain_text(&error), "the standalone stream failed");
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LISTEN_MAX_PAUSE);
            }
        }
    }
}

/// The first pause before a standalone stream is opened again.
const LISTEN_FIRST_PAUSE: Duration = Duration::from_millis(500);

/// The longest pause between attempts at a standalone stream. 30 s: a server restarting is
/// followed again soon after, and one refusing streams is asked twice a minute at most.
const LISTEN_MAX_PAUSE: Duration = Duration::from_secs(30);

/// The most one standalone stream connection is read before it is opened again. 1 MiB: list
/// changes are a few dozen bytes each; anything larger is not what the sidecar listens for.
const LISTEN_MAX_BYTES: usize = 1024 * 1024;

/// The most pages one re-list reads.
const MAX_LIST_PAGES: usize = 100;

/// How long the DELETE ending a session may take.
const END_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer a direct call reads: rmcp's own limit for a JSON response.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Why an answer could not be read.
#[derive(Debug, Error)]
enum ReadError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("the answer exceeds {0} bytes")]
    TooLarge(usize),
}

/// The body of `response` as a stream that fails once more than `limit` bytes have come.
fn limited_bytes(
    response: reqwest::Response,
    limit: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, ReadError>> + Send + 'static {
    let mut size = 0usize;
    response.bytes_stream().map(move |chunk| {
        let chunk = chunk?;
        size += chunk.len();
        if size > limit {
            return Err(ReadError::TooLarge(limit));
        }
        Ok(chunk)
    })
}

async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
