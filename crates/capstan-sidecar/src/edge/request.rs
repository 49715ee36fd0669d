//! What passes from the gate (`edge/gate.rs`) to what serves a request (`edge.rs`): one
//! [`EdgeRequest`], read once, with what the gate established about it ([`Checked`]).

use std::sync::Arc;

use axum::http::request::Parts;
use axum::response::Response;
use futures::future::BoxFuture;

use crate::caller::identity::Identity;
use crate::message::Message;
use crate::task::Task;
use crate::tasks::Admitted;

/// What the gate established about a request: who asks, the task of the session it names or
/// the caller's task without a session, and the place it was admitted with. (What serves it
/// runs in the request's span, `observe/request_span.rs`; work it spawns carries the span along.)
#[derive(Clone)]
pub(crate) struct Checked {
    pub(crate) identity: Identity,
    /// The task of the session the request names, bound to this caller.
    pub(crate) session: Option<Arc<Task>>,
    /// The caller's task without a session (a 2026-07-28 request), its streams counted.
    pub(crate) caller_task: Option<Arc<Task>>,
    /// The place an `initialize` or a caller's first request took, and the task it starts.
    pub(crate) admitted: Option<Admitted>,
}

/// A request the gate let through, read once.
pub(crate) struct EdgeRequest {
    pub(crate) checked: Checked,
    pub(crate) parts: Parts,
    /// An MCP POST's JSON-RPC message, parsed once.
    pub(crate) message: Option<Message>,
}

/// What serves the requests the gate lets through: [`Edge::dispatch`] (a test of the gate's
/// own serves them with a handler that records that it was reached).
pub(crate) type Serve = Arc<dyn Fn(EdgeRequest) -> BoxFuture<'static, Response> + Send + Sync>;

/// A refusal made on the way in, answered as it is (boxed: a response is large beside the
/// values the checks return when a request passes).
pub(crate) type Refused = Box<Response>;
