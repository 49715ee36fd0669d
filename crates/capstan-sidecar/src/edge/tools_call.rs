//! `tools/call`, answered in the request's own task: in a session, or without one (2026-07-28)
//! from the caller's task the gate resolved. Its protocol headers were checked by the edge
//! (`edge/protocol.rs`); `Task::call` serves it, and its answer is written for its revision
//! (`edge/answer.rs`) as an `application/json` body, which Streamable HTTP allows for any POST.
//!
//! rmcp's server would hand the call through its service loop and a handler task and stream
//! the answer back through the same hops; on the hot path of a sidecar those hand-offs cost
//! more than the forwarding itself, so the edge serves calls itself (docs/architecture.md
//! "One way in").
//!
//! A provider that says something about the call before answering it — progress on the
//! caller's token, log messages (capstan-upstream `mcp/relay.rs`) — turns the answer into an
//! SSE stream: those messages as events, in order, then the result. A call about which nothing
//! is said is answered as JSON.
//!
//! The caller's `notifications/cancelled` for a call in a session stops it
//! (`task/in_flight.rs`): the call is dropped — which cancels it at the provider
//! (capstan-upstream `mcp/call.rs`) — and its stream ends without an answer, as the spec asks.
//! A call without a session is cancelled by closing its stream (no id of it is tracked: ids
//! are the caller's own per request).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use capstan_upstream::mcp::RELAY_CAPACITY;
use capstan_upstream::mcp::ToCaller;
use capstan_upstream::trace_context::in_this_request;
use futures::StreamExt;
use rmcp::ErrorData as McpError;
use rmcp::model::ResultType;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::{Value, json};

use super::answer;
use super::answer::Revision;
use crate::caller::identity::Identity;
use crate::message::{Envelope, Params};
use crate::task::Task;

/// Serves the call in `message` for `caller` with `task` (`in_session` when it is the
/// session's), answering in `revision`: as JSON, or as an SSE stream when the provider says
/// something about the call first.
pub(super) async fn serve(
    task: Arc<Task>,
    caller: Identity,
    message: Box<Envelope>,
    in_session: bool,
    revision: Revision,
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
            return answer::error(&id, error, revision);
        }
    };
    let (sink, mut relayed) = tokio::sync::mpsc::channel(RELAY_CAPACITY);
    let cancelled = cancellation(&task, &id, in_session);
    let asking = task.clone();
    // In the request's span even when it ends while its answer streams, after the gate
    // has returned.
    let mut call: PendingCall = Box::pin(in_this_request(async move {
        tokio::select! {
            answer = task.call(Some(&caller), params, Some(sink)) => {
                Some(answer.map(complete))
            }
            // Dropping the call gives it up at the provider too (capstan-upstream
            // `mcp/call.rs`).
            () = cancelled => None,
        }
    }));
    tokio::select! {
        biased;
        answer = &mut call => match (answer, relayed.try_recv()) {
            // Messages the provider sent just before its answer were queued while the call
            // finished: they go first, on a stream (found losing a progress notification).
            (answer, Ok(first)) => {
                let ended: PendingCall = Box::pin(std::future::ready(answer));
                streamed(&asking, id, first, relayed, ended, revision)
            }
            (Some(answer), Err(_)) => {
                answer::json(&answer::answer(&id, answer.map(Into::into), revision), revision)
            }
            (None, Err(_)) => no_answer(),
        },
        Some(first) = relayed.recv() => streamed(&asking, id, first, relayed, call, revision),
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

/// A call's answer marked whole (`resultType`, which 2026-07-28 requires; the answer takes it
/// out again for a session's revision, `edge/answer.rs`).
fn complete(answer: CallToolResponse) -> CallToolResponse {
    match answer {
        CallToolResponse::Complete(mut result) => {
            result.result_type.get_or_insert(ResultType::COMPLETE);
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
    revision: Revision,
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
        answer.map(|answer| answer::text(&answer::answer(&id, answer.map(Into::into), revision)))
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
