//! The sidecar's one way in. Every request on the socket but `/healthz` passes the gate
//! (`edge/gate.rs`: the Host, the caller's identity, an MCP POST's body read and parsed once,
//! the session and its caller checked, what the request opens admitted) and comes out of it as
//! one [`EdgeRequest`], which [`Edge::dispatch`] serves: the one place a request is told apart
//! by what it asks.
//!
//! Every MCP POST of one message is first held to the protocol's rules (`edge/protocol.rs`:
//! media types, the revision header against the body, the standard headers, the `_meta`),
//! which give the revision it is answered in (`edge/answer.rs`). Then:
//!
//! - a session's GET stream and its DELETE: `edge/session_stream.rs`;
//! - `tools/call`, and the caller's cancellation of a call or answer to a provider's question:
//!   `edge/tools_call.rs`, in the request's own task;
//! - `subscriptions/listen`: `edge/listen.rs`;
//! - every other request — `initialize`, `server/discover`, the lists, a prompt, a resource
//!   or a skill, a completion, the log level, a session's subscriptions, `ping` — answered in
//!   one step by its handler in `edge/methods.rs`; a notification is acknowledged;
//! - the inspection reads (`/v1/composition`, `/v1/routes`, `/v1/route-decisions`:
//!   `edge/inspect.rs`, `edge/inspect/routes.rs`).
//!
//! rmcp is the model library here: its types are the requests' and the answers', and no
//! server of its runs (docs/architecture.md "One way in").

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::ErrorData as McpError;
use serde_json::Value;

mod answer;
pub(crate) mod gate;
mod inspect;
mod listen;
mod methods;
pub(crate) mod protocol;
pub(crate) mod request;
mod session_stream;
mod tools_call;

use self::answer::Revision;
use self::gate::{Gate, check, check_host};
use self::inspect::routes::{route_decisions, routes};
use self::inspect::{CompositionViews, Inspection, composition};
use self::protocol::check_post;
use self::request::{EdgeRequest, Refused, Serve};
use crate::composition::composer::ProjectComposer;
use crate::message::{Message, Params};
use crate::observe::request_span::RequestTracing;
use crate::task::{ANOTHER_CALLER, Task};
use crate::tasks::reaper::reap;
use crate::tasks::{TaskStarter, Tasks};

/// Builds the router over the task registry `tasks` (tasks started by `starter`; inspection
/// composing with `composer`; requests traced as `tracing` decides) and starts its reaper. Call within a Tokio runtime. Clients use
/// the URL `http://localhost/...` (a Unix socket has no DNS-rebinding exposure; the fixed value
/// keeps requests uniform).
pub fn router(
    composer: Arc<ProjectComposer>,
    starter: Arc<TaskStarter>,
    tasks: Arc<Tasks>,
    tracing: RequestTracing,
) -> Router {
    tokio::spawn(reap(tasks.clone()));
    let edge = Arc::new(Edge {
        starter: starter.clone(),
        inspection: Arc::new(Inspection {
            views: CompositionViews::new(tasks.admission().caps().total),
            tasks: tasks.clone(),
            composer,
        }),
        tasks: tasks.clone(),
    });
    let serve: Serve = Arc::new(move |request| Box::pin(edge.clone().dispatch(request)));
    let gate = Gate {
        tasks,
        starter: Some(starter),
        serve,
        tracing,
    };
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(check)
        .with_state(gate)
        .layer(axum::middleware::from_fn(check_host))
}

/// What serves the requests the gate lets through.
struct Edge {
    tasks: Arc<Tasks>,
    starter: Arc<TaskStarter>,
    inspection: Arc<Inspection>,
}

/// What an MCP request asks.
enum Asked {
    /// A session's GET stream.
    SessionStream(Arc<Task>),
    /// A session's DELETE.
    SessionEnd,
    /// `initialize`: a session revision's handshake.
    Initialize,
    /// `tools/call`, served by `task` (in a session, or the caller's task without one).
    Call { task: Arc<Task>, in_session: bool },
    /// `subscriptions/listen`, served by the caller's task.
    Listen(Arc<Task>),
    /// Any other request, answered from `task` in one step (`edge/methods.rs`).
    Method(Arc<Task>),
    /// The caller's `notifications/cancelled` for request `id` of the session's task.
    Cancel(Arc<Task>, Value),
    /// The caller's answer to the question with id `id` the session's task asked it.
    Answer(Arc<Task>, Value),
    /// Any other notification: acknowledged.
    Notification,
    /// What the sidecar serves in no way.
    Refused(Refusal),
}

/// Why a request is served in no way.
enum Refusal {
    /// An HTTP method MCP does not use on its endpoint.
    NotAllowed,
    /// A body that is no single JSON-RPC message: a batch (no revision served has them), or
    /// no object.
    NotOneMessage,
    /// A request whose id is neither a string nor a number.
    BadId,
    /// An answer without a session: only a session's task asks its caller anything.
    StrayAnswer,
    /// A request no task serves (a session revision's request before `initialize`).
    NoTask,
    /// A task that is not the caller's (the gate let none through: checked again here, as
    /// `Task::call` checks again, so that no handler is one check from another's task).
    AnotherCaller,
}

impl Edge {
    /// Serves `request`: the one place a request is told apart by what it asks.
    async fn dispatch(self: Arc<Self>, request: EdgeRequest) -> Response {
        let path = request.parts.uri.path();
        if path != "/mcp" && !path.starts_with("/mcp/") {
            return self.inspect(request).await;
        }
        let revision = match checked_post(&request) {
            Ok(revision) => revision,
            Err(refused) => return *refused,
        };
        let asked = asked(&request);
        let message = match request.message {
            Some(Message::Single(message)) => Some(message),
            _ => None,
        };
        match (asked, message) {
            (Asked::SessionStream(task), _) => session_stream::open(&task, &request.parts.headers),
            (Asked::SessionEnd, _) => session_stream::end(&self.tasks, &request.parts.headers),
            (Asked::Initialize, Some(message)) => {
                methods::initialize(&self.starter, &request.checked, message, revision).await
            }
            (Asked::Call { task, in_session }, Some(message)) => {
                let caller = request.checked.identity;
                tools_call::serve(task, caller, message, in_session, revision).await
            }
            (Asked::Listen(task), Some(message)) => listen::serve(task, message, revision).await,
            (Asked::Method(task), Some(message)) => methods::serve(task, message, revision).await,
            (Asked::Cancel(task, id), _) => {
                // A request served in one step runs to its end: none waits on a provider's
                // question.
                task.cancel_call(&id);
                StatusCode::ACCEPTED.into_response()
            }
            (Asked::Answer(task, id), Some(message)) => {
                // An answer nobody waits for any more is accepted and dropped.
                if let Some(answer) = message.answer {
                    task.answer(&id, answer);
                }
                StatusCode::ACCEPTED.into_response()
            }
            (Asked::Notification, _) => StatusCode::ACCEPTED.into_response(),
            (Asked::Refused(refusal), message) => {
                let id = message.and_then(|message| message.id);
                refused(refusal, id.as_ref(), revision)
            }
            // `asked` finds a request, a cancellation or an answer only in one message.
            (_, None) => refused(Refusal::NotOneMessage, None, revision),
        }
    }

    /// The inspection reads: GET (or HEAD) only.
    async fn inspect(&self, request: EdgeRequest) -> Response {
        let EdgeRequest { checked, parts, .. } = request;
        let read = match parts.uri.path() {
            "/v1/composition" => Read::Composition,
            "/v1/routes" => Read::Routes,
            "/v1/route-decisions" => Read::RouteDecisions,
            _ => return StatusCode::NOT_FOUND.into_response(),
        };
        if parts.method != Method::GET && parts.method != Method::HEAD {
            return (
                StatusCode::METHOD_NOT_ALLOWED,
                [(header::ALLOW, "GET,HEAD")],
            )
                .into_response();
        }
        let inspection = &self.inspection;
        match read {
            Read::Composition => composition(inspection, &checked).await,
            Read::Routes => routes(inspection, &checked, &parts).await,
            Read::RouteDecisions => route_decisions(inspection, &checked, &parts),
        }
    }
}

/// The inspection reads.
enum Read {
    Composition,
    Routes,
    RouteDecisions,
}

/// What `request` asks.
fn asked(request: &EdgeRequest) -> Asked {
    let session = request.checked.session.as_ref();
    match (&request.parts.method, session) {
        (&Method::GET, Some(task)) => return Asked::SessionStream(task.clone()),
        (&Method::DELETE, Some(_)) => return Asked::SessionEnd,
        (&Method::POST, _) => {}
        _ => return Asked::Refused(Refusal::NotAllowed),
    }
    let Some(message) = request.message.as_ref().and_then(Message::single) else {
        return Asked::Refused(Refusal::NotOneMessage);
    };
    let task = session.or(request.checked.caller_task.as_ref()).cloned();
    if task
        .as_ref()
        .is_some_and(|task| !task.owned_by(Some(&request.checked.identity)))
    {
        return Asked::Refused(Refusal::AnotherCaller);
    }
    match (message.method(), message.id.as_ref()) {
        (Some(_), Some(id)) if !(id.is_string() || id.is_number()) => {
            Asked::Refused(Refusal::BadId)
        }
        (Some("initialize"), Some(_)) => Asked::Initialize,
        (Some(method), Some(_)) => match (method, task) {
            ("tools/call", Some(task)) => Asked::Call {
                task,
                in_session: session.is_some(),
            },
            ("subscriptions/listen", Some(task)) => Asked::Listen(task),
            (_, Some(task)) => Asked::Method(task),
            (_, None) => Asked::Refused(Refusal::NoTask),
        },
        (Some("notifications/cancelled"), None) => {
            let cancelled = message.untyped_params().and_then(|p| p.get("requestId"));
            match (session, cancelled) {
                (Some(task), Some(id)) => Asked::Cancel(task.clone(), id.clone()),
                _ => Asked::Notification,
            }
        }
        (Some(_), None) => Asked::Notification,
        (None, Some(id)) if message.answer.is_some() => match session {
            Some(task) => Asked::Answer(task.clone(), id.clone()),
            None => Asked::Refused(Refusal::StrayAnswer),
        },
        (None, _) => Asked::Refused(Refusal::NotOneMessage),
    }
}

/// The answer to what the sidecar serves in no way.
fn refused(refusal: Refusal, id: Option<&Value>, revision: Revision) -> Response {
    let id = id.unwrap_or(&Value::Null);
    match refusal {
        Refusal::NotAllowed => (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, POST, DELETE")],
            "Method Not Allowed: MCP takes POST, and a session's GET and DELETE",
        )
            .into_response(),
        Refusal::NotOneMessage => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: send one JSON-RPC message per POST (no batches)",
        )
            .into_response(),
        Refusal::BadId => answer::refusal(
            None,
            McpError::invalid_request("a request's id is a string or a number", None),
        ),
        Refusal::StrayAnswer => answer::refusal(
            None,
            McpError::invalid_request("stateless server does not accept JSON-RPC responses", None),
        ),
        Refusal::NoTask => answer::error(
            id,
            McpError::invalid_request("the session is not initialized", None),
            revision,
        ),
        Refusal::AnotherCaller => answer::error(
            id,
            McpError::invalid_request(ANOTHER_CALLER, None),
            revision,
        ),
    }
}

/// The protocol's rules checked on an MCP POST of one message (`edge/protocol.rs`): its
/// revision, or the answer that refuses it. A `tools/call` is checked against the argument
/// headers its tool asks for, when the caller's task serves the tool.
fn checked_post(request: &EdgeRequest) -> Result<Revision, Refused> {
    let Some(message) = request.message.as_ref().and_then(Message::single) else {
        return Ok(Revision::default());
    };
    let served = match (&message.params, &request.checked.caller_task) {
        (Params::Call(_), Some(task)) => Some(task.served()),
        _ => None,
    };
    let marks = match (&message.params, &served) {
        (Params::Call(params), Some(served)) => served.argument_headers(&params.name),
        _ => None,
    };
    check_post(&request.parts.headers, message, marks)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
