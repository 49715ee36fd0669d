//! What a session asks that is not a JSON-RPC request: its GET stream and its DELETE.
//!
//! The sidecar keeps its sessions itself (`tasks.rs`): it mints the id when `initialize`
//! answers (`edge/gate.rs`, `settle`), and serves each POST of a session from the session's
//! task. The two requests that are about the session itself are answered here, for a
//! session the gate has found bound to this caller:
//!
//! - **GET** opens a stream of the session: its list changes and the updates of resources it
//!   subscribed to, as SSE events (`Task::open_session_stream`; each on one stream, when the
//!   client holds several; a change already waiting for a client slow to read is not queued
//!   twice, `task/outbox.rs`), with a keep-alive comment every 15 s. It ends when the task does
//!   (DELETE, idle, a revoked caller, shutdown) or the client leaves; its place is the gate's
//!   (a task's streams are capped). It replays nothing (`Last-Event-ID` opens a new stream): a
//!   client that missed a change re-lists.
//! - **DELETE** ends the session (`Tasks::end`): its upstream sessions and streams close, and
//!   its next request is 404.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use capstan_api::wire::MCP_SESSION_ID;
use futures::StreamExt as _;

use super::protocol::{check_revision, check_stream};
use crate::task::Task;
use crate::tasks::{TaskKey, Tasks};

/// How often a stream held open gets a keep-alive comment: the Python SDK drops a stream
/// silent for 300 s, and a proxy in between may sooner.
pub(crate) const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A session's GET: the stream of `task`.
pub(super) fn open(task: &Arc<Task>, headers: &HeaderMap) -> Response {
    if let Err(refused) = check_stream(headers) {
        return *refused;
    }
    let stream = task.open_session_stream();
    let mut ended = task.ended();
    let messages = futures::stream::unfold(stream, |mut stream| async move {
        Some((stream.next().await, stream))
    })
    .take_until(async move {
        let _ = ended.changed().await;
    })
    .map(|message| Ok::<_, Infallible>(Event::default().data(message.to_string())));
    Sse::new(messages)
        .keep_alive(KeepAlive::new().interval(SSE_KEEP_ALIVE))
        .into_response()
}

/// A session's DELETE: the session the request names ends.
pub(super) fn end(tasks: &Tasks, headers: &HeaderMap) -> Response {
    if let Err(refused) = check_revision(headers) {
        return *refused;
    }
    if let Some(id) = headers.get(MCP_SESSION_ID).and_then(|v| v.to_str().ok()) {
        tasks.end(&TaskKey::Session(id.to_owned()));
    }
    StatusCode::NO_CONTENT.into_response()
}
