//! `tools/call` on an open session, answered in the request's own task.
//!
//! rmcp's Streamable HTTP server hands every request through its session manager, the
//! session's worker, the service loop and a handler task, and streams the answer back as SSE
//! through the same hops. For the hot path of a sidecar — a tool call inside a session
//! whose identity the middleware has just checked — those hand-offs cost more than the
//! forwarding itself (the sidecar benchmark's profile: context switches and channel hops
//! were most of the sidecar's own time). So a single `tools/call` request with a live task is
//! served here with the same `Task::call` the rmcp handler uses, and answered with an
//! `application/json` body, which Streamable HTTP allows for any POST. Everything else —
//! `initialize`, `tools/list`, notifications, batches — goes to rmcp (a session's GET stream
//! and DELETE to `session_requests.rs`).
//!
//! A `tools/call` of the 2026-07-28 revision (no session) is answered here too, from the
//! caller's task the middleware resolved, when it is plainly well-formed: `MCP-Protocol-Version`
//! and its `_meta` both name 2026-07-28, and `Mcp-Method` and `Mcp-Name` are each sent once
//! and agree with the body as plain text. Any other such request — a header missing,
//! repeated, contradicting or Base64-encoded, another revision — goes to rmcp, whose checks
//! answer it. Its result carries `resultType`, and it is cancelled by closing its stream (no
//! id of it is tracked: ids are the caller's own per request).
//!
//! A provider that says something about the call before answering it — progress on the
//! caller's token, log messages (capstan-upstream `mcp/relay.rs`) — turns the answer
//! into an SSE stream: those messages as events, in order, then the result. A call about which
//! nothing is said is answered as JSON, as before.
//!
//! The caller's `notifications/cancelled` for a call served here stops it (`task/in_flight.rs`):
//! the call is dropped — which cancels it at the provider (capstan-upstream `mcp/call.rs`) — and its
//! stream ends without an answer, as the spec asks.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use capstan_api::wire::{MCP_METHOD, MCP_PROTOCOL_VERSION};
use capstan_compose::{RELAY_CAPACITY, ToCaller};
use futures::StreamExt;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ServerResult};
use rmcp::model::{ProtocolVersion, ResultType};
use serde_json::{Value, json};
use tracing::Instrument as _;

use crate::identity::Identity;
use crate::mcp::SUPPORTED_VERSIONS;
use crate::message::{Envelope, Message, PROTOCOL_VERSION_META, Params};
use crate::middleware::{CallerTask, SessionTask};
use crate::request_span;
use crate::task::Task;

/// The middleware: serves `tools/call` of a live session or a plain 2026-07-28 caller, stops
/// one on the caller's `notifications/cancelled`, passes everything else on.
pub async fn tools_call(mut request: Request, next: Next) -> Response {
    let is_call = match intercepted(&request) {
        Intercepted::Call => true,
        Intercepted::Cancel(id) => {
            if let Some(SessionTask(task)) = request.extensions().get::<SessionTask>() {
                task.cancel_call(&id);
            }
            // rmcp acknowledges the notification. A request it serves (`prompts/get`, …) runs
            // to its end: rmcp keeps no session to find it in, and none waits on a provider's
            // question.
            false
        }
        Intercepted::Answer(id) => {
            // In a session only the sidecar asks the caller anything (rmcp keeps no session),
            // so an answer nobody waits for any more is accepted and dropped.
            if let Some(SessionTask(task)) = request.extensions().get::<SessionTask>() {
                let answer = request.extensions().get::<Message>();
                if let Some(answer) = answer
                    .and_then(Message::single)
                    .and_then(|m| m.answer.clone())
                {
                    task.answer(&id, answer);
                }
                return StatusCode::ACCEPTED.into_response();
            }
            false
        }
        Intercepted::Other => false,
    };
    let in_session = request.extensions().get::<SessionTask>().is_some();
    if !is_call || !(in_session || plain_sessionless_call(&request)) {
        return next.run(request).await;
    }
    if in_session && let Some(refused) = header_mismatch(&request) {
        return refused;
    }
    let task = match request.extensions_mut().remove::<SessionTask>() {
        Some(SessionTask(task)) => Some(task),
        None => request
            .extensions_mut()
            .remove::<CallerTask>()
            .map(|CallerTask(task)| task),
    };
    let (Some(Message::Single(message)), Some(task)) =
        (request.extensions_mut().remove::<Message>(), task)
    else {
        return next.run(request).await;
    };
    let caller = request.extensions().get::<Identity>().cloned();
    serve(task, caller, message, in_session).await
}

/// Serves the call in `message` with `task`: its answer as JSON, or as an SSE stream when the
/// provider says something about the call first.
async fn serve(
    task: Arc<Task>,
    caller: Option<Identity>,
    message: Box<Envelope>,
    in_session: bool,
) -> Response {
    let Envelope { id, params, .. } = *message;
    let id = id.unwrap_or_default();
    let params = match params {
        Params::Call(params) => Ok(*params),
        // Params that do not fit a call's type get its own error.
        Params::Other(params) => serde_json::from_value::<CallToolRequestParams>(params),
        Params::Absent => serde_json::from_value::<CallToolRequestParams>(Value::Null),
    };
    let params = match params {
        Ok(params) => params,
        Err(error) => {
            let error = McpError::invalid_params(format!("tools/call params: {error}"), None);
            return json_answer(&answer_message(&id, Err(error)));
        }
    };
    let (sink, mut relayed) = tokio::sync::mpsc::channel(RELAY_CAPACITY);
    let cancelled = cancellation(&task, &id, in_session);
    let asking = task.clone();
    // In the request's span even when it ends while its answer streams, after the middleware
    // has returned.
    let mut call: PendingCall = Box::pin(
        async move {
            tokio::select! {
                answer = task.call(caller.as_ref(), params, Some(sink)) => {
                    Some(answer.map(|answer| typed_for(answer, in_session)))
                }
                // Dropping the call gives it up at the provider too (capstan-upstream `mcp/call.rs`).
                () = cancelled => None,
            }
        }
        .instrument(tracing::Span::current()),
    );
    tokio::select! {
        biased;
        answer = &mut call => match (answer, relayed.try_recv()) {
            // Messages the provider sent just before its answer were queued while the call
            // finished: they go first, on a stream (found losing a progress notification).
            (answer, Ok(first)) => {
                let ended: PendingCall = Box::pin(std::future::ready(answer));
                streamed(&asking, id, first, relayed, ended)
            }
            (Some(answer), Err(_)) => {
                let message = answer_message(&id, answer);
                let status = status_of(&message, in_session);
                with_status(json_answer(&message), status)
            }
            (None, Err(_)) => no_answer(),
        },
        Some(first) = relayed.recv() => streamed(&asking, id, first, relayed, call),
    }
}

/// Fires when the caller cancels call `id`: in a session by `notifications/cancelled` (the call
/// is tracked until this future is dropped); without one never (closing the stream drops the
/// call instead).
fn cancellation(
    task: &Arc<Task>,
    id: &Value,
    in_session: bool,
) -> impl Future<Output = ()> + Send + 'static {
    let tracked = in_session.then(|| task.track_call(id));
    async move {
        match tracked {
            Some((_tracked, cancelled)) => drop(cancelled.await),
            None => std::future::pending().await,
        }
    }
}

/// A call's answer as its caller's revision types it: a result of 2026-07-28 says it is
/// complete (`resultType`); a session revision has no place for it, so it is taken out of
/// one that came with it (a built-in's, a provider's spoken to in 2026-07-28), as rmcp does
/// for the calls it serves.
fn typed_for(answer: CallToolResponse, in_session: bool) -> CallToolResponse {
    match answer {
        CallToolResponse::Complete(mut result) => {
            if in_session {
                result.result_type = None;
            } else {
                result.result_type.get_or_insert(ResultType::COMPLETE);
            }
            CallToolResponse::Complete(result)
        }
        other => other,
    }
}

/// Whether a `tools/call` without a session is one this path answers (the module's comment):
/// the caller's task resolved, 2026-07-28 in the header and the `_meta`, `Mcp-Method` and
/// `Mcp-Name` once each and equal to the body's method and name as plain text.
fn plain_sessionless_call(request: &Request) -> bool {
    let extensions = request.extensions();
    let (Some(message), Some(_)) = (
        extensions.get::<Message>().and_then(Message::single),
        extensions.get::<CallerTask>(),
    ) else {
        return false;
    };
    let headers = request.headers();
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        }
    };
    let revision = ProtocolVersion::V_2026_07_28.as_str();
    let name = message.param("name");
    one(MCP_PROTOCOL_VERSION) == Some(revision)
        && message.meta_str(PROTOCOL_VERSION_META) == Some(revision)
        && one(MCP_METHOD) == Some("tools/call")
        && name.is_some_and(|name| !name.starts_with(BASE64_PREFIX) && one(MCP_NAME) == Some(name))
}

/// `Mcp-Name`: the tool a 2026-07-28 `tools/call` names.
const MCP_NAME: &str = "mcp-name";
/// A header value sent Base64-encoded starts so (left to rmcp to decode and check).
const BASE64_PREFIX: &str = "=?base64?";

/// What the middleware looks at in a request's message.
enum Intercepted {
    /// A `tools/call` request.
    Call,
    /// A `notifications/cancelled` for the request with this id.
    Cancel(Value),
    /// A response of the caller's, to the request with this id (a provider's question).
    Answer(Value),
    /// Anything else.
    Other,
}

fn intercepted(request: &Request) -> Intercepted {
    let Some(message) = request
        .extensions()
        .get::<Message>()
        .and_then(Message::single)
    else {
        return Intercepted::Other;
    };
    let id = message.id.as_ref();
    match message.method() {
        Some("tools/call") if id.is_some_and(|id| id.is_string() || id.is_number()) => {
            Intercepted::Call
        }
        Some("notifications/cancelled") if id.is_none() => {
            let params = message.untyped_params();
            match params.and_then(|p| p.get("requestId")) {
                Some(id) => Intercepted::Cancel(id.clone()),
                None => Intercepted::Other,
            }
        }
        None if message.answer.is_some() => {
            id.map_or(Intercepted::Other, |id| Intercepted::Answer(id.clone()))
        }
        _ => Intercepted::Other,
    }
}

/// A call being served (`None`: the caller cancelled it), owned so that it can move into a
/// streamed answer.
type PendingCall = Pin<Box<dyn Future<Output = Option<Result<CallToolResponse, McpError>>> + Send>>;

/// The reply to a request the caller cancelled: the spec sends it no answer, so an event
/// stream that ends without one.
fn no_answer() -> Response {
    Sse::new(futures::stream::empty::<Result<Event, Infallible>>()).into_response()
}

/// The JSON-RPC answer to request `id`.
fn answer_message(id: &Value, answer: Result<CallToolResponse, McpError>) -> AnswerMessage<'_> {
    let (result, error) = match answer {
        // A tool result, or (2026-07-28) an `input_required` result as the provider gave it.
        Ok(response) => (Some(ServerResult::from(response)), None),
        Err(error) => {
            request_span::failed(&error.code.0.to_string());
            (None, Some(error))
        }
    };
    AnswerMessage {
        jsonrpc: "2.0",
        id,
        result,
        error,
    }
}

/// The JSON-RPC answer to a call, serialized straight into its body: building a `Value` first
/// cost a second tree of maps per call on the hot path (docs/performance.md).
#[derive(serde::Serialize)]
struct AnswerMessage<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<ServerResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<McpError>,
}

/// The HTTP status of a JSON answer: 200, but in 2026-07-28 (no session) 400 for the errors
/// that revision answers with it — a missing client capability (-32021), an unsupported
/// revision, a header that contradicts the body — as rmcp answers the requests it serves.
fn status_of(message: &AnswerMessage<'_>, in_session: bool) -> StatusCode {
    match &message.error {
        Some(error)
            if !in_session
                && matches!(
                    error.code,
                    rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
                        | rmcp::model::ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
                        | rmcp::model::ErrorCode::HEADER_MISMATCH
                ) =>
        {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

/// `response` with `status`.
fn with_status(mut response: Response, status: StatusCode) -> Response {
    *response.status_mut() = status;
    response
}

/// The answer as one `application/json` body.
fn json_answer(message: &AnswerMessage<'_>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        serde_json::to_vec(message).unwrap_or_default(),
    )
        .into_response()
}

/// The answer as an SSE stream: `first` and every message relayed after it, then the answer.
/// The call runs on in a task of its own; the relay's sender lives in the call, so the
/// messages end when the call does, and the answer follows the last of them. A caller that
/// goes away drops the stream, which stops the call. A provider's question goes out under an
/// id of `task`'s, which the caller's response is matched by (`task/in_flight.rs`).
fn streamed(
    task: &Arc<Task>,
    id: Value,
    first: ToCaller,
    relayed: tokio::sync::mpsc::Receiver<ToCaller>,
    call: PendingCall,
) -> Response {
    let running = AbortOnDrop(tokio::spawn(call));
    let rest = futures::stream::unfold(relayed, |mut relayed| async move {
        relayed.recv().await.map(|n| (n, relayed))
    });
    let task = task.clone();
    let notifications = futures::stream::once(std::future::ready(first))
        .chain(rest)
        .map(move |message| to_caller_message(&task, message));
    let answer = futures::stream::once(async move {
        let mut running = running;
        let answer = (&mut running.0).await.unwrap_or_else(|error| {
            Some(Err(McpError::internal_error(
                format!("the call ended without an answer: {error}"),
                None,
            )))
        });
        // A cancelled call ends its stream without an answer.
        answer.map(|answer| serde_json::to_string(&answer_message(&id, answer)).unwrap_or_default())
    })
    .filter_map(std::future::ready);
    let events = notifications
        .map(|message| message.to_string())
        .chain(answer)
        .map(|message| Ok::<_, Infallible>(Event::default().data(message)));
    Sse::new(events).into_response()
}

/// The JSON-RPC message the caller gets for `message`: a notification as it is, a request
/// under an id of `task`'s.
fn to_caller_message(task: &Task, message: ToCaller) -> Value {
    let (message, id) = match message {
        ToCaller::Notification(notification) => (serde_json::to_value(notification), None),
        ToCaller::Request { request, answer } => {
            (serde_json::to_value(request), Some(task.ask(answer)))
        }
    };
    let mut message = message.unwrap_or_default();
    message["jsonrpc"] = json!("2.0");
    if let Some(id) = id {
        message["id"] = json!(id);
    }
    message
}

/// A spawned call, stopped when its stream is dropped before the answer.
struct AbortOnDrop(tokio::task::JoinHandle<Option<Result<CallToolResponse, McpError>>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The checks rmcp makes on a request's protocol headers, made here for the calls it does not
/// see: a `MCP-Protocol-Version` the sidecar does not speak, or an `Mcp-Method` header that
/// contradicts the body, is refused with 400.
fn header_mismatch(request: &Request) -> Option<Response> {
    let headers = request.headers();
    if let Some(refused) = unknown_revision(headers) {
        return Some(refused);
    }
    if let Some(method) = headers.get(MCP_METHOD)
        && method.as_bytes() != b"tools/call"
    {
        return Some(bad_request(
            "the Mcp-Method header does not match the request's method",
        ));
    }
    None
}

/// A `MCP-Protocol-Version` the sidecar does not speak, refused with 400 as rmcp refuses it:
/// the check of every request of a session rmcp does not see (a call here, a GET stream or
/// DELETE in `session_requests.rs`).
pub(crate) fn unknown_revision(headers: &axum::http::HeaderMap) -> Option<Response> {
    let version = headers.get(MCP_PROTOCOL_VERSION)?;
    let known = version
        .to_str()
        .is_ok_and(|v| SUPPORTED_VERSIONS.iter().any(|s| s.as_str() == v));
    (!known).then(|| {
        bad_request("unsupported MCP-Protocol-Version: use the revision negotiated at initialize")
    })
}

fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({
            "jsonrpc": "2.0", "id": null,
            "error": { "code": -32600, "message": message }
        })),
    )
        .into_response()
}
