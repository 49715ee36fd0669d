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
//! - the requests answered from the task in one step — the lists, a prompt, a resource or a
//!   skill, a completion, the log level, a session's subscriptions, `ping`:
//!   `edge/methods.rs`, one handler each;
//! - the inspection reads (`/v1/composition`, `/v1/routes`, `/v1/route-decisions`:
//!   `edge/inspect.rs`, `edge/inspect/routes.rs`);
//! - what is left — `initialize`, `server/discover`, `subscriptions/listen`, notifications,
//!   batches, methods nobody serves — rmcp's Streamable HTTP server, with a handler made for
//!   the request (`edge/rmcp_handler.rs`), which is handed what the gate established as the
//!   one `Checked` on the request (rmcp's handlers see the HTTP request's parts and nothing
//!   else). rmcp checks those again by its own rules, which are the same.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use capstan_api::wire::SOCKET_HOST;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;

mod answer;
pub(crate) mod gate;
mod inspect;
mod methods;
pub(crate) mod protocol;
pub(crate) mod request;
mod rmcp_handler;
mod session_stream;
mod tools_call;

use self::answer::Revision;
use self::gate::{Gate, MAX_BODY_BYTES, check, check_host};
use self::inspect::routes::{route_decisions, routes};
use self::inspect::{CompositionViews, Inspection, composition};
use self::protocol::check_post;
use self::request::{EdgeRequest, Refused, Serve};
use self::rmcp_handler::SessionHandler;
use self::session_stream::SSE_KEEP_ALIVE;
use crate::message::{Message, Params};
use crate::project_composer::ProjectComposer;
use crate::reaper::reap;
use crate::task::Task;
use crate::tasks::{TaskStarter, Tasks};

/// Builds the router over the task registry `tasks` (tasks started by `starter`; inspection
/// composing with `composer`) and starts its reaper. Call within a Tokio runtime. Clients use
/// the URL `http://localhost/...` (a Unix socket has no DNS-rebinding exposure; the fixed value
/// keeps requests uniform).
pub fn router(
    composer: Arc<ProjectComposer>,
    starter: Arc<TaskStarter>,
    tasks: Arc<Tasks>,
) -> Router {
    tokio::spawn(reap(tasks.clone()));
    let edge = Arc::new(Edge {
        mcp: mcp_server(&tasks, &starter),
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
    };
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(check)
        .with_state(gate)
        .layer(axum::middleware::from_fn(check_host))
}

/// rmcp's Streamable HTTP server, keeping no session: each request gets a handler of its own
/// (`edge/rmcp_handler.rs`), which finds the task the gate resolved. A session costs what the sidecar keeps
/// for it (docs/performance.md "Memory per session").
fn mcp_server(
    tasks: &Arc<Tasks>,
    starter: &Arc<TaskStarter>,
) -> StreamableHttpService<SessionHandler, NeverSessionManager> {
    let (tasks, starter) = (tasks.clone(), starter.clone());
    StreamableHttpService::new(
        move || Ok(SessionHandler::new(tasks.clone(), starter.clone())),
        Arc::new(NeverSessionManager::default()),
        // A 2026-07-28 `subscriptions/listen` stream gets a keep-alive comment like a
        // session's GET stream. An answer that comes alone is JSON (an SSE stream only when
        // the handler sends something first): `initialize` must have answered before its
        // response leaves, for the gate to mint the session's id over the task it started
        // (`edge/gate.rs`, `settle`).
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
            .with_allowed_hosts([SOCKET_HOST])
            .with_max_request_body_bytes(MAX_BODY_BYTES),
    )
}

/// What serves the requests the gate lets through.
struct Edge {
    tasks: Arc<Tasks>,
    mcp: StreamableHttpService<SessionHandler, NeverSessionManager>,
    inspection: Arc<Inspection>,
}

/// What an MCP request asks, as far as the sidecar answers it itself.
enum Asked {
    /// A session's GET stream.
    SessionStream(Arc<Task>),
    /// A session's DELETE.
    SessionEnd,
    /// `tools/call`, served by `task` (in a session, or the caller's task without one).
    Call { task: Arc<Task>, in_session: bool },
    /// A request answered from `task` in one step (`edge/methods.rs`).
    Method(Arc<Task>),
    /// The caller's `notifications/cancelled` for request `id` of the session's task.
    Cancel(Arc<Task>, Value),
    /// The caller's answer to the question with id `id` the session's task asked it.
    Answer(Arc<Task>, Value),
    /// Anything else: rmcp serves it.
    Other,
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
        match asked(&request) {
            Asked::SessionStream(task) => session_stream::open(&task, &request.parts.headers),
            Asked::SessionEnd => session_stream::end(&self.tasks, &request.parts.headers),
            Asked::Call { task, in_session } => {
                tools_call::serve(task, request, in_session, revision).await
            }
            Asked::Method(task) => match request.message {
                Some(Message::Single(message)) => methods::serve(task, message, revision).await,
                // `asked` finds a method only in a message that is one.
                _ => StatusCode::BAD_REQUEST.into_response(),
            },
            Asked::Cancel(task, id) => {
                task.cancel_call(&id);
                // rmcp acknowledges the notification. A request it serves (`prompts/get`, …)
                // runs to its end: rmcp keeps no session to find it in, and none waits on a
                // provider's question.
                self.rmcp(request).await
            }
            Asked::Answer(task, id) => {
                // In a session only the sidecar asks the caller anything (rmcp keeps no
                // session), so an answer nobody waits for any more is accepted and dropped.
                let answer = request.message.as_ref().and_then(Message::single);
                if let Some(answer) = answer.and_then(|m| m.answer.clone()) {
                    task.answer(&id, answer);
                }
                StatusCode::ACCEPTED.into_response()
            }
            Asked::Other => self.rmcp(request).await,
        }
    }

    /// An MCP request rmcp serves, handed what the gate established.
    async fn rmcp(&self, request: EdgeRequest) -> Response {
        let EdgeRequest {
            checked,
            mut parts,
            body,
            ..
        } = request;
        parts.extensions.insert(checked);
        let response = self.mcp.handle(Request::from_parts(parts, body)).await;
        response.map(Body::new)
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

/// What `request` asks, among what the sidecar answers itself.
fn asked(request: &EdgeRequest) -> Asked {
    let session = request.checked.session.as_ref();
    match (&request.parts.method, session) {
        (&Method::GET, Some(task)) => return Asked::SessionStream(task.clone()),
        (&Method::DELETE, Some(_)) => return Asked::SessionEnd,
        _ => {}
    }
    let Some(message) = request.message.as_ref().and_then(Message::single) else {
        return Asked::Other;
    };
    let id = message.id.as_ref();
    let request_id = id.is_some_and(|id| id.is_string() || id.is_number());
    let task = session.or(request.checked.caller_task.as_ref());
    match (message.method(), session) {
        (Some("tools/call"), _) if !request_id => Asked::Other,
        (Some("tools/call"), _) => match task {
            Some(task) => Asked::Call {
                task: task.clone(),
                in_session: session.is_some(),
            },
            None => Asked::Other,
        },
        (Some(method), _) if request_id && methods::serves(method) => match task {
            Some(task) => Asked::Method(task.clone()),
            None => Asked::Other,
        },
        (Some("notifications/cancelled"), Some(task)) if id.is_none() => {
            let params = message.untyped_params();
            match params.and_then(|p| p.get("requestId")) {
                Some(id) => Asked::Cancel(task.clone(), id.clone()),
                None => Asked::Other,
            }
        }
        (None, Some(task)) if message.answer.is_some() => match id {
            Some(id) => Asked::Answer(task.clone(), id.clone()),
            None => Asked::Other,
        },
        _ => Asked::Other,
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
