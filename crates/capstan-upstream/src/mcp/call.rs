//! `tools/call` (and a re-list with `tools/list`) straight to the upstream: one POST in the
//! caller's own task — on the session rmcp opened, or self-contained in 2026-07-28
//! (`mcp/revision.rs`) —, the answer read as JSON or from the SSE stream up to the
//! response with this request's id.
//!
//! rmcp's client routes every request through its service loop, its transport worker and a task
//! per response stream, and back; the sidecar benchmark's profile was dominated by those task
//! switches, and this path cut a forwarded call's latency by a third. rmcp opens the session
//! (initialize, tools/list) and then lets go of it (`mcp.rs`); the calls and the closing
//! DELETE are sent from here. Hand-written because rmcp offers no call that skips its worker,
//! and keeping its client alive only to send the DELETE cost most of a session's memory; it
//! applies the same limits rmcp does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt as _;
use http::Request;
use http::request::Builder;
use http_body_util::Full;
use rmcp::model::{
    CallToolResponse, CallToolResult, ErrorCode, ErrorData, InputRequiredResult, JsonObject,
    ListToolsResult, ResultType, Tool,
};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tracing::{Instrument as _, debug};

use super::Forwarded;
use super::call_span::{client_span, failed};
use super::changes::UpstreamChanges;
use super::error::CallError;
use super::lane::{Lane, LaneError};
use super::limited::limited_bytes;
use super::relay::CallTraffic;
use super::revision::{
    LISTEN_ACKNOWLEDGEMENT_WAIT, ParamHeader, Revision, Subscribed, param_headers,
};
use crate::trace_context::Outgoing;
use capstan_core::error_chain::chain_text;

mod answer;

use self::answer::Answer;

/// Where direct requests go and how they are addressed; cheap to clone into a task of its own.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// The endpoint, for spans and errors.
    pub(crate) url: url::Url,
    /// The upstream's connections, driven by the task that sends on them (`mcp/lane.rs`):
    /// every request after the handshake goes on one.
    pub(crate) lane: Lane,
    pub(crate) revision: Arc<Revision>,
}

impl Target {
    /// A POST of `message` with the headers of its revision (`headed`: the argument headers of
    /// the tool it calls), still without its body.
    pub(crate) fn post(&self, message: &Value, headed: Option<&[ParamHeader]>) -> Builder {
        let request = self
            .lane
            .post()
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream");
        self.revision.headers(request, message, headed)
    }

    /// [`Self::post`] with `message` as its body.
    pub(crate) fn post_message(
        &self,
        message: &Value,
        headed: Option<&[ParamHeader]>,
    ) -> Result<Request<Full<Bytes>>, http::Error> {
        self.post(message, headed).body(json_body(message))
    }
}

/// `message` as a request body.
fn json_body(message: &Value) -> Full<Bytes> {
    Full::new(Bytes::from(serde_json::to_vec(message).unwrap_or_default()))
}

/// Sends `request` on `lane` and reads its answer to the end (so that the connection goes back
/// to the pool), within [`END_TIMEOUT`]: the answer's status, or why there was none. For what
/// Capstan tells a provider outside a call's own exchange: answers to its requests,
/// cancellations, the DELETE ending a session.
async fn deliver(
    lane: Lane,
    request: Result<Request<Full<Bytes>>, http::Error>,
) -> Result<http::StatusCode, Undelivered> {
    let request = request.map_err(Undelivered::Request)?;
    // Read to the end without keeping it (nothing in it is used), within the answer limit: a
    // longer one is dropped, which closes its connection.
    let exchange = lane.exchange(request, |response| async move {
        let status = response.status();
        let _ = limited_bytes(response, MAX_ANSWER_BYTES)
            .try_for_each(|_| std::future::ready(Ok(())))
            .await;
        status
    });
    match tokio::time::timeout(END_TIMEOUT, exchange).await {
        Ok(Ok(status)) => Ok(status),
        Ok(Err(error)) => Err(Undelivered::Lane(error)),
        Err(_) => Err(Undelivered::TimedOut),
    }
}

/// Why a message to a provider outside a call's own exchange was not delivered.
#[derive(Debug, thiserror::Error)]
enum Undelivered {
    /// The request could not be built (a header no request can carry).
    #[error("building the request")]
    Request(#[source] http::Error),
    /// The connection failed.
    #[error("sending it")]
    Lane(#[source] LaneError),
    /// No answer within [`END_TIMEOUT`].
    #[error("no answer within {END_TIMEOUT:?}")]
    TimedOut,
}

/// The tool a `tools/call` request names.
fn request_tool(request: &Value) -> Option<&str> {
    request["params"]["name"].as_str()
}

/// What a tool call needs to go straight to the server: where it goes, how it is addressed,
/// and what the revision keeps per upstream.
pub(crate) struct DirectCalls {
    /// The `mcpServers[].name` entry, for errors.
    pub(crate) server: String,
    pub(crate) target: Target,
    pub(crate) next_id: AtomicU64,
    /// Where the server's list changes (on a call's stream, or its standalone stream) are
    /// noted, for a server followed for them.
    pub(crate) changes: Option<UpstreamChanges>,
    /// The argument headers of the server's tools that have any (2026-07-28), by tool.
    pub(crate) headed: RwLock<BTreeMap<String, Vec<ParamHeader>>>,
    /// The resources the task's sessions subscribed to (2026-07-28: named on the listen
    /// stream, `mcp/listen.rs`).
    pub(crate) subscribed: Subscribed,
    /// The log level the caller asked for (2026-07-28: sent on every request).
    pub(crate) log_level: Mutex<Option<Value>>,
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
    /// (`mcp/relay.rs`).
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        traffic: &CallTraffic,
    ) -> Result<CallToolResponse, CallError> {
        let id = self.next_request_id();
        let mut params = json!({ "name": tool, "arguments": arguments.unwrap_or_default() });
        if let Some(meta) = traffic.upstream_meta(&id) {
            params["_meta"] = meta;
        }
        if let Some(responses) = &traffic.input_responses {
            params["inputResponses"] = json!(responses);
        }
        if let Some(state) = &traffic.request_state {
            params["requestState"] = json!(state);
        }
        self.stamp(&mut params, traffic.caller_capabilities());
        // A call given up before its answer (the caller cancelled it, or its time ran out) is
        // cancelled at the provider too: told in a session revision, its stream closed in
        // 2026-07-28 (`answer_in_stream`). Made lazily: an `Abandoned` made and dropped at once
        // (as `then_some` would) tells the provider that a call it is about to get is given up.
        let abandoned = (!self.target.revision.is_stateless()).then(|| Abandoned {
            calls: self,
            id: &id,
        });
        let answer = self
            .request_as(&id, "tools/call", params, Some(tool), traffic)
            .await;
        std::mem::forget(abandoned);
        let result = answer?;
        let not_a_result = || CallError::Malformed {
            server: self.server.clone(),
            message: "the answer to tools/call is not a tool result".into(),
        };
        // 2026-07-28: the provider asks the caller something first (an `input_required` result,
        // passed on as it is; its `requestState` is never read here).
        let input_required = || {
            serde_json::from_str::<InputRequiredResult>(result.get())
                .map(CallToolResponse::InputRequired)
                .map_err(|e| {
                    self.malformed(format!("an input_required result that is not one: {e}"))
                })
        };
        match serde_json::from_str::<CallToolResult>(result.get()) {
            Ok(complete) if !is_input_required(complete.result_type.as_ref()) => {
                Ok(CallToolResponse::Complete(complete))
            }
            Ok(_) => input_required(),
            Err(_) if says_input_required(&result) => input_required(),
            Err(_) => Err(not_a_result()),
        }
    }

    /// `logging/setLevel` on the session; in 2026-07-28, the level every request carries.
    pub(crate) async fn set_log_level(&self, params: Value) -> Result<(), CallError> {
        if self.target.revision.is_stateless() {
            *lock(&self.log_level) = params.get("level").cloned();
            return Ok(());
        }
        self.request("logging/setLevel", params, None)
            .await
            .map(drop)
    }

    /// The client context and log level on a 2026-07-28 request's `_meta` (nothing in a
    /// session revision).
    fn stamp(&self, params: &mut Value, caller_capabilities: Option<&Value>) {
        if !self.target.revision.is_stateless() {
            return;
        }
        let level = lock(&self.log_level).clone();
        self.target
            .revision
            .stamp(params, caller_capabilities, level.as_ref());
    }

    /// One request of the caller's on the session: the provider's `result`, or its error
    /// answer as it gave it.
    pub(crate) async fn forward(
        &self,
        method: &str,
        mut params: Value,
        caller_capabilities: Option<&Value>,
    ) -> Result<Value, Forwarded> {
        if self.target.revision.is_stateless()
            && let Some(subscribed) = match method {
                "resources/subscribe" => Some(true),
                "resources/unsubscribe" => Some(false),
                _ => None,
            }
        {
            // No such request in 2026-07-28: the URI is named on the listen stream instead.
            let uri = params
                .get("uri")
                .and_then(Value::as_str)
                .unwrap_or_default();
            self.subscribed.set(uri, subscribed);
            // Carried once a stream naming it is acknowledged: an update the provider sends
            // from then on is heard (`mcp/listen.rs`).
            if subscribed
                && !self
                    .subscribed
                    .until_named(uri, LISTEN_ACKNOWLEDGEMENT_WAIT)
                    .await
            {
                return Err(Forwarded::Failed(CallError::Unavailable {
                    server: self.server.clone(),
                    message: format!(
                        "no listen stream naming {uri} was acknowledged within {} s",
                        LISTEN_ACKNOWLEDGEMENT_WAIT.as_secs()
                    ),
                }));
            }
            return Ok(json!({}));
        }
        self.stamp(&mut params, caller_capabilities);
        let id = self.next_request_id();
        let span = client_span(&self.server, &self.target.url, method, None);
        let answer = async {
            self.exchange(&id, method, params, &CallTraffic::default())
                .await
        }
        .instrument(span.clone())
        .await;
        let answer = answer.map_err(|error| {
            failed(&span, error.kind().as_str());
            Forwarded::Failed(error)
        })?;
        if let Some(error) = answer.error {
            return match serde_json::from_value::<ErrorData>(error) {
                Ok(error) => Err(Forwarded::Refused(error)),
                Err(e) => Err(Forwarded::Failed(
                    self.malformed(format!("an error answer that is not one: {e}")),
                )),
            };
        }
        let result = answer.result.ok_or_else(|| {
            Forwarded::Failed(self.malformed(format!(
                "the answer to {method} has neither a result nor an error"
            )))
        })?;
        serde_json::from_str::<Value>(result.get()).map_err(|e| {
            Forwarded::Failed(self.malformed(format!("the answer to {method} is not JSON: {e}")))
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
            let mut params = params;
            self.stamp(&mut params, None);
            let result = self.request("tools/list", params, None).await?;
            let page = serde_json::from_str::<ListToolsResult>(result.get()).map_err(|_| {
                CallError::Malformed {
                    server: self.server.clone(),
                    message: "the answer to tools/list is not a tool list".into(),
                }
            })?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if !next.is_empty() => cursor = Some(next),
                _ => {
                    self.headed_by(&tools);
                    return Ok(tools);
                }
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
    ) -> Result<Box<RawValue>, CallError> {
        let id = self.next_request_id();
        self.request_as(&id, method, params, tool, &CallTraffic::default())
            .await
    }

    /// Keeps the argument headers of `tools` (the server's whole list) for its calls.
    pub(crate) fn headed_by(&self, tools: &[Tool]) {
        if self.target.revision.is_stateless() {
            *self.headed.write().unwrap_or_else(|p| p.into_inner()) = param_headers(tools);
        }
    }

    /// The next request id on the session; a call's minted progress token is the same string.
    pub(crate) fn next_request_id(&self) -> String {
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
    ) -> Result<Box<RawValue>, CallError> {
        let span = client_span(&self.server, &self.target.url, method, tool);
        let result = async {
            let answer = self.exchange(id, method, params, traffic).await?;
            self.result_of(answer, method, tool)
        }
        .instrument(span.clone())
        .await;
        if let Err(error) = &result {
            failed(&span, error.kind().as_str());
        }
        result
    }

    /// POSTs the request on the session and reads its answer (`answer`), on the upstream's
    /// lane in this task (`mcp/lane.rs`).
    async fn exchange(
        &self,
        id: &str,
        method: &str,
        mut params: Value,
        traffic: &CallTraffic,
    ) -> Result<Answer, CallError> {
        // The provider's spans join the trace, whichever carrier it reads.
        let context = Outgoing::current();
        context.stamp_meta(&mut params);
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": method,
            "params": params,
        });
        // Built under the lock of the argument headers, sent after it.
        let mut post = {
            let headed = self.headed.read().unwrap_or_else(|p| p.into_inner());
            let tool = (method == "tools/call")
                .then(|| request_tool(&request))
                .flatten();
            let headers = tool.and_then(|t| headed.get(t)).map(Vec::as_slice);
            self.target.post(&request, headers)
        };
        for (name, value) in context.entries() {
            post = post.header(name, value);
        }
        let post = post
            .body(json_body(&request))
            .map_err(|error| self.unavailable(chain_text(&error)))?;
        // Boxed: the exchange holds the connection, the request and the reading of its answer
        // at once, and every future around a call would otherwise carry (and move, layer by
        // layer) all of it (docs/performance.md "The request path, stop 24").
        let exchange = self
            .target
            .lane
            .exchange(post, |response| self.answer(response, id, traffic));
        Box::pin(exchange)
            .await
            .map_err(|error| self.unavailable(chain_text(&error)))?
    }

    /// POSTs a JSON-RPC response to a request of the provider's on the session. The provider
    /// answers 202; a failure only means the provider waits for its own timeout, which is not
    /// this call's error. A 2026-07-28 server without a session is never asked
    /// (`answer_in_stream` gives the call up first).
    async fn post_answer(&self, answer: &Value) {
        if self.target.revision.answerable() {
            self.posting(answer).await;
        }
    }

    /// POSTs `message` (a response or a notification: the provider answers 202) on the session,
    /// owning what it needs (for a task of its own). Undelivered is only logged.
    fn posting(&self, message: &Value) -> impl Future<Output = ()> + Send + 'static {
        let request = self.target.post_message(message, None);
        let lane = self.target.lane.clone();
        let server = self.server.clone();
        async move {
            if let Err(error) = deliver(lane, request).await {
                let error = chain_text(&error);
                debug!(%server, %error, "a message to the server was not delivered");
            }
        }
    }

    /// The `result` of `answer`; an error answer is `invalid_input` when it is about the
    /// parameters of `tool`, else unavailable.
    fn result_of(
        &self,
        answer: Answer,
        method: &str,
        tool: Option<&str>,
    ) -> Result<Box<RawValue>, CallError> {
        if let Some(error) = &answer.error {
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
                _ if code == i64::from(ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY.0) => {
                    CallError::Refused {
                        server: self.server.clone(),
                        message,
                        required: super::error::required_capabilities(error.get("data")),
                    }
                }
                _ => self.unavailable(format!("error {code}: {message}")),
            });
        }
        answer.result.ok_or_else(|| {
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

    /// The DELETE ending the session, owning what it needs (for a task of its own); without a
    /// session (2026-07-28, or a server that assigned none) there is nothing to end.
    pub(crate) fn ending(&self) -> impl Future<Output = ()> + Send + 'static {
        let target = &self.target;
        let request = target.revision.session().is_some().then(|| {
            let request = target.lane.request(http::Method::DELETE);
            target
                .revision
                .headers(request, &Value::Null, None)
                .body(Full::default())
        });
        let lane = target.lane.clone();
        async move {
            if let Some(request) = request {
                let _ = deliver(lane, request).await;
            }
        }
    }
}

/// The most pages one re-list reads.
const MAX_LIST_PAGES: usize = 100;

/// How long the DELETE ending a session may take.
const END_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer a direct call reads: rmcp's own limit for a JSON response.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// `mutex` locked; only whole values are written under it, so a poisoned one holds a whole value.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a result's type is `input_required` (2026-07-28).
fn is_input_required(result_type: Option<&ResultType>) -> bool {
    result_type.is_some_and(|t| t.as_str() == ResultType::INPUT_REQUIRED.as_str())
}

/// Whether a result that is no tool result says it is `input_required` (read only then).
fn says_input_required(result: &RawValue) -> bool {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "resultType")]
        result_type: Option<ResultType>,
    }
    serde_json::from_str::<Typed>(result.get())
        .is_ok_and(|typed| is_input_required(typed.result_type.as_ref()))
}
