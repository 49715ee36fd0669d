//! The HTTP surface on the Unix socket: MCP at `/mcp`, the composition at `/v1/composition`,
//! and `/healthz`. Clients use the URL `http://localhost/...` (the Host value the MCP service
//! accepts; a Unix socket has no DNS-rebinding exposure, the fixed value just keeps requests
//! uniform).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use crate::direct;
use crate::handler::{LOAD_SKILL, SessionHandler};
use crate::identity::{self, Identity, MAX_BODY_BYTES, Sessions};
use crate::sidecar::Sidecar;

/// The Host value MCP requests must carry: clients connect to `http://localhost/mcp`.
pub const HOST: &str = "localhost";

/// Builds the router and starts the idle reaper, which closes a session after `idle`
/// without a request. Call within a Tokio runtime.
pub fn router(sidecar: Arc<Sidecar>, idle: Duration) -> Router {
    // rmcp's own idle timer counts only what reaches its session worker; tool calls served
    // by `direct.rs` do not, so the sidecar keeps the idle clock itself.
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = None;
    let mut manager = LocalSessionManager::default();
    manager.session_config = session_config;
    let manager = Arc::new(manager);
    tokio::spawn(reap_idle(sidecar.sessions.clone(), manager.clone(), idle));
    let mcp: StreamableHttpService<SessionHandler, LocalSessionManager> =
        StreamableHttpService::new(
            {
                let sidecar = sidecar.clone();
                move || Ok(SessionHandler::new(sidecar.clone()))
            },
            manager,
            StreamableHttpServerConfig::default()
                .with_sse_keep_alive(None)
                .with_allowed_hosts([HOST])
                .with_max_request_body_bytes(MAX_BODY_BYTES),
        );
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/v1/composition", get(composition))
        .layer(axum::middleware::from_fn(direct::tools_call))
        .layer(axum::middleware::from_fn_with_state(
            sidecar.sessions.clone(),
            identity::check,
        ))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(sidecar)
}

/// `GET /v1/composition`: composes the caller's project and returns it as JSON (tools with
/// `mutating`, per-binding outcomes with `degraded` and `reasons`, instructions, skills).
async fn composition(State(sidecar): State<Arc<Sidecar>>, parts: Parts) -> Response {
    let Some(identity) = parts.extensions.get::<Identity>().cloned() else {
        return identity::refusal(
            axum::http::StatusCode::BAD_REQUEST,
            "forbidden",
            "no caller identity",
        );
    };
    let task = sidecar.compose(&identity).await;
    let composition = &task.composed.composition;
    let mut body = serde_json::to_value(composition).unwrap_or(Value::Null);
    if let Some(bindings) = body.get_mut("bindings").and_then(Value::as_array_mut) {
        for (view, outcome) in bindings.iter_mut().zip(&composition.bindings) {
            view["degraded"] = json!(outcome.degraded());
            view["reasons"] = json!(outcome.reasons());
        }
    }
    body["project"] = json!(identity.project);
    body["builtins"] = if composition.skills.is_empty() {
        json!([])
    } else {
        json!([LOAD_SKILL])
    };
    task.composed.close().await;
    axum::Json(body).into_response()
}

/// Closes sessions idle for `idle`: unbinds them (later requests are not served) and ends the
/// rmcp session, which drops the task and closes its upstreams.
async fn reap_idle(sessions: Arc<Sessions>, manager: Arc<LocalSessionManager>, idle: Duration) {
    let period = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for id in sessions.idle(idle) {
            sessions.remove(&id);
            if let Err(error) = manager.close_session(&id.as_str().into()).await {
                tracing::warn!(%error, "closing an idle session");
            }
            tracing::info!(?idle, "idle session closed");
        }
    }
}
