//! The HTTP surface on the Unix socket, wired: MCP at `/mcp` (rmcp behind the identity
//! middleware, with `tools/call` of a live session answered by `call_fast_path.rs`), the composition at
//! `/v1/composition`, and `/healthz`, all behind the Host check. Clients use the URL
//! `http://localhost/...` (a Unix socket has no DNS-rebinding exposure; the fixed value keeps
//! requests uniform).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use capstan_api::wire::SOCKET_HOST;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::call_fast_path;
use crate::inspect::{CompositionViews, Inspection, composition};
use crate::mcp::SessionHandler;
use crate::middleware::{Gate, MAX_BODY_BYTES, check, check_host};
use crate::project_composer::ProjectComposer;
use crate::reaper::reap;
use crate::routing_endpoints::{route_decisions, routes};
use crate::tasks::{TaskStarter, Tasks};

/// How often a stream held open gets a keep-alive comment.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Builds the router over the task registry `tasks` (tasks started by `starter`; inspection
/// composing with `composer`) and starts its reaper. Call within a Tokio runtime.
pub fn router(
    composer: Arc<ProjectComposer>,
    starter: Arc<TaskStarter>,
    tasks: Arc<Tasks>,
) -> Router {
    // rmcp's own idle timer counts only what reaches its session worker; tool calls served
    // by `call_fast_path.rs` do not, so the sidecar keeps the idle clock itself (`reaper.rs`).
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = None;
    let mut manager = LocalSessionManager::default();
    manager.session_config = session_config;
    let manager = Arc::new(manager);
    tokio::spawn(reap(tasks.clone(), manager.clone()));
    let mcp: StreamableHttpService<SessionHandler, LocalSessionManager> =
        StreamableHttpService::new(
            {
                let (tasks, starter) = (tasks.clone(), starter.clone());
                move || Ok(SessionHandler::new(tasks.clone(), starter.clone()))
            },
            manager,
            // Streams held open (a session's GET stream, a 2026-07-28 `subscriptions/listen`)
            // get a keep-alive comment every 15 s: the Python SDK drops a stream silent for
            // 300 s, and a proxy in between may sooner.
            StreamableHttpServerConfig::default()
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
            Gate {
                tasks,
                starter: Some(starter),
            },
            check,
        ))
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(axum::middleware::from_fn(check_host))
}
