//! Every request to an upstream after its handshake (`mcp/handshake.rs`): `tools/call`, the
//! lists, the caller's other requests (`forward`), each one POST in the caller's own task on
//! the upstream's lane — on the session the handshake opened, or self-contained in 2026-07-28
//! (`mcp/revision.rs`) — its answer read as JSON or from the SSE stream up to the response
//! with this request's id (`call/answer.rs`); and what is sent outside a call's exchange
//! (`call/deliver.rs`).
//!
//! Hand-written rather than rmcp's client: that client routes every request through its service
//! loop, its transport worker and a task per response stream, and back, and keeps them for as
//! long as the session lives; the sidecar benchmark's profile was dominated by those task
//! switches (docs/architecture.md "One way out"). The limits are rmcp's own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use http::Request;
use http::request::Builder;
use http_body_util::Full;
use rmcp::model::{
    CallToolResponse, CallToolResult, ErrorCode, ErrorData, InputRequiredResult, JsonObject,
    ListToolsResult, ResultType, Tool,
};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tracing::{Instrument as _, warn};

use super::Forwarded;
use super::call_span::{client_span, failed};
use super::changes::UpstreamChanges;
use super::error::CallError;
use super::lane::{Lane, LaneError};
use super::param_headers::{ParamHeader, header_defect, param_headers};
use super::relay::CallTraffic;
use super::revision::{LISTEN_ACKNOWLEDGEMENT_WAIT, Revision, Subscribed};
use crate::trace_context::Outgoing;
use capstan_core::error_chain::chain_text;

mod answer;
mod deliver;

pub(crate) use self::answer::Answer;
use self::deliver::Abandoned;

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
    /// One `tools/call` POSTed in the caller's own task, its answer read (JSON, or the SSE
    /// stream up to the response with this request's id).
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
            let mut listed = page.tools;
            if self.target.revision.is_stateless() {
                self.refuse_defective_headers(&mut listed);
            }
            tools.extend(listed);
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

    /// Drops each of `tools` whose argument headers break the rules (`mcp/param_headers.rs`): a
    /// call of it could not carry them as its schema means. Logged with the reason, for the
    /// provider's team; the binding's allow-list then names a tool the server does not offer.
    fn refuse_defective_headers(&self, tools: &mut Vec<Tool>) {
        tools.retain(|tool| {
            let Some(defect) = header_defect(&tool.input_schema) else {
                return true;
            };
            warn!(server = %self.server, tool = %tool.name, %defect,
                "a tool whose argument headers break the rules is not offered");
            false
        });
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
        // layer) all of it.
        let exchange = self
            .target
            .lane
            .exchange(post, |response| self.answer(response, id, traffic));
        Box::pin(exchange)
            .await
            .map_err(|error| self.lane_failed(&error))?
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

    /// A request that failed on the lane: its credential could not be had (it was not sent),
    /// or the server could not be reached.
    fn lane_failed(&self, error: &LaneError) -> CallError {
        match error {
            LaneError::Credential(failed) => CallError::Credential {
                server: self.server.clone(),
                failed: failed.clone(),
            },
            other => self.unavailable(chain_text(other)),
        }
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

/// The most pages one re-list reads.
const MAX_LIST_PAGES: usize = 100;

/// The largest answer a direct call reads: rmcp's own limit for a JSON response.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

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
