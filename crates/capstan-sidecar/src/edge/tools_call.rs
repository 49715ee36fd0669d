//! `tools/call` on an open session, answered in the request's own task.
//!
//! rmcp's Streamable HTTP server hands every request through its session manager, the
//! session's worker, the service loop and a handler task, and streams the answer back as SSE
//! through the same hops. For the hot path of a sidecar — a tool call inside a session
//! whose identity the gate has just checked — those hand-offs cost more than the
//! forwarding itself (the sidecar benchmark's profile: context switches and channel hops
//! were most of the sidecar's own time). So a single `tools/call` request with a live task is
//! served here with the same `Task::call` the rmcp handler uses, and answered with an
//! `application/json` body, which Streamable HTTP allows for any POST. Everything else —
//! `initialize`, `tools/list`, notifications, batches — goes to rmcp (a session's GET stream
//! and DELETE to `edge/session_stream.rs`).
//!
//! A `tools/call` of the 2026-07-28 revision (no session) is answered here too, from the
//! caller's task the gate resolved, when it is plainly well-formed
//! (`edge/protocol.rs` `plain_sessionless_call`); any other goes to rmcp, whose checks answer
//! it. Its result carries `resultType`, and it is cancelled by closing its stream (no
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

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use capstan_compose::{RELAY_CAPACITY, ToCaller};
use futures::StreamExt;
use rmcp::ErrorData as McpError;
use rmcp::model::ResultType;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ServerResult};
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::protocol::header_mismatch;
use super::request::EdgeRequest;
use crate::identity::{Identity, refusal};
use crate::message::{Envelope, Message, Params};
use crate::request_span;
use crate::task::Task;

/// Serves a `tools/call` (`request`, told apart by the edge's dispatcher) with `task`: in a
/// session, its protocol headers checked first.
pub(super) async fn serve(task: Arc<Task>, request: EdgeRequest, in_session: bool) -> Response {
    if in_session && let Some(refused) = header_mismatch(&request.parts.headers) {
        return refused;
    }
    let Some(Message::Single(message)) = request.message else {
        return refusal(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "tools/call: send one JSON-RPC request, not a batch",
        );
    };
    serve_call(task, Some(request.checked.identity), message, in_session).await
}

/// Serves the call in `message` with `task`: its answer as JSON, or as an SSE stream when the
/// provider says something about the call first.
async fn serve_call(
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
    // In the request's span even when it ends while its answer streams, after the gate
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
