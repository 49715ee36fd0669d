//! The sidecar's one way in. Every request on the socket but `/healthz` passes the gate
//! (`edge/gate.rs`: the Host, the caller's identity, an MCP POST's body read and parsed once,
//! the session and its caller checked, what the request opens admitted) and comes out of it as
//! one [`EdgeRequest`], which [`Edge::dispatch`] serves: the one place a request is told apart
//! by what it asks.
//!
//! - a session's GET stream and its DELETE: `edge/session_stream.rs`;
//! - `tools/call` in a session or a plain 2026-07-28 one, and the caller's cancellation of a
//!   call or answer to a provider's question: `edge/tools_call.rs`, in the request's own task;
//! - the inspection reads (`/v1/composition`, `/v1/routes`, `/v1/route-decisions`:
//!   `edge/inspect.rs`, `edge/inspect/routes.rs`);
//! - every other MCP request: rmcp's Streamable HTTP server, with a handler made for the
//!   request (`edge/rmcp_handler.rs`), which is handed what the gate established as the one `Checked` on
//!   the request (rmcp's handlers see the HTTP request's parts and nothing else).
//!
//! The protocol headers of the requests the sidecar answers itself are checked in
//! `edge/protocol.rs`; rmcp checks those of the requests it serves.

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

pub(crate) mod gate;
mod inspect;
pub(crate) mod protocol;
pub(crate) mod request;
mod rmcp_handler;
mod session_stream;
mod tools_call;

use self::gate::{Gate, MAX_BODY_BYTES, check, check_host};
use self::inspect::routes::{route_decisions, routes};
use self::inspect::{CompositionViews, Inspection, composition};
use self::protocol::{argument_headers_refused, plain_sessionless_call};
use self::request::{EdgeRequest, Serve};
use self::rmcp_handler::SessionHandler;
use self::session_stream::SSE_KEEP_ALIVE;
use crate::message::Message;
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
        if let Some(refused) = argument_headers_refused(&request) {
            return refused;
        }
        match asked(&request) {
            Asked::SessionStream(task) => session_stream::open(&task, &request.parts.headers),
            Asked::SessionEnd => session_stream::end(&self.tasks, &request.parts.headers),
            Asked::Call { task, in_session } => tools_call::serve(task, request, in_session).await,
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
    match (message.method(), session) {
        (Some("tools/call"), _) if !id.is_some_and(|id| id.is_string() || id.is_number()) => {
            Asked::Other
        }
        (Some("tools/call"), Some(task)) => Asked::Call {
            task: task.clone(),
            in_session: true,
        },
        (Some("tools/call"), None) => match &request.checked.caller_task {
            Some(task) if plain_sessionless_call(&request.parts.headers, message) => Asked::Call {
                task: task.clone(),
                in_session: false,
            },
            _ => Asked::Other,
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
