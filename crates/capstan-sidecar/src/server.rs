//! The HTTP surface on the Unix socket, wired: MCP at `/mcp` behind the identity middleware —
//! `tools/call` answered by `call_fast_path.rs`, a session's GET stream and DELETE by
//! `session_requests.rs`, every other request by rmcp with a handler made for it (sessions
//! are the sidecar's own: `tasks.rs`) — the composition at `/v1/composition`, and
//! `/healthz`, all behind the Host check. Clients use the URL `http://localhost/...` (a Unix
//! socket has no DNS-rebinding exposure; the fixed value keeps requests uniform).

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use capstan_api::wire::SOCKET_HOST;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::call_fast_path;
use crate::inspect::{CompositionViews, Inspection, composition};
use crate::mcp::SessionHandler;
use crate::middleware::{Gate, MAX_BODY_BYTES, check, check_host};
use crate::project_composer::ProjectComposer;
use crate::reaper::reap;
use crate::routing_endpoints::{route_decisions, routes};
use crate::session_requests::{SSE_KEEP_ALIVE, session_requests};
use crate::tasks::{TaskStarter, Tasks};

/// Builds the router over the task registry `tasks` (tasks started by `starter`; inspection
/// composing with `composer`) and starts its reaper. Call within a Tokio runtime.
pub fn router(
    composer: Arc<ProjectComposer>,
    starter: Arc<TaskStarter>,
    tasks: Arc<Tasks>,
) -> Router {
    tokio::spawn(reap(tasks.clone()));
    // rmcp keeps no session: each request gets a handler of its own (`mcp.rs`), which finds
    // the session's task the middleware resolved. A session costs what the sidecar keeps for
    // it (docs/performance.md "Memory per session").
    let mcp: StreamableHttpService<SessionHandler, NeverSessionManager> =
        StreamableHttpService::new(
            {
                let (tasks, starter) = (tasks.clone(), starter.clone());
                move || Ok(SessionHandler::new(tasks.clone(), starter.clone()))
            },
            Arc::new(NeverSessionManager::default()),
            // A 2026-07-28 `subscriptions/listen` stream gets a keep-alive comment like a
            // session's GET stream. An answer that comes alone is JSON (an SSE stream only
            // when the handler sends something first): `initialize` must have answered before
            // its response leaves, for the middleware to mint the session's id over the task
            // it started (`middleware.rs`, `settle`).
            StreamableHttpServerConfig::default()
                .with_legacy_session_mode(false)
                .with_json_response(true)
                .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
                .with_allowed_hosts([SOCKET_HOST])
                .with_max_request_body_bytes(MAX_BODY_BYTES),
        );
    let inspection = Arc::new(Inspection {
        views: CompositionViews::new(tasks.admission().caps().total),
        tasks: tasks.clone(),
        composer,
    });
    Router::new()
        .nest_service("/mcp", mcp)
        .route(
            "/v1/composition",
            get(composition).with_state(inspection.clone()),
        )
        .route(
            "/v1/route-decisions",
            get(route_decisions).with_state(inspection.clone()),
        )
        .route("/v1/routes", get(routes).with_state(inspection))
        .layer(axum::middleware::from_fn(call_fast_path::tools_call))
        .layer(axum::middleware::from_fn_with_state(
            tasks.clone(),
            session_requests,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Gate {
                tasks,
                starter: Some(starter),
            },
            check,
        ))
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(axum::middleware::from_fn(check_host))
}
