//! The HTTP surface on the Unix socket: MCP at `/mcp`, the composition at `/v1/composition`,
//! and `/healthz`. Clients use the URL `http://localhost/...` (the Host value the MCP service
//! accepts; a Unix socket has no DNS-rebinding exposure, the fixed value just keeps requests
//! uniform).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use capstan_compose::Composed;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use crate::direct;
use crate::handler::{LOAD_SKILL, SessionHandler};
use crate::identity::{self, Identity, MAX_BODY_BYTES, SessionTask, Sessions};
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
    let views = Arc::new(CompositionViews::new(sidecar.sessions.max_sessions()));
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/v1/composition", get(composition).layer(Extension(views)))
        .layer(axum::middleware::from_fn(direct::tools_call))
        .layer(axum::middleware::from_fn_with_state(
            sidecar.sessions.clone(),
            identity::check,
        ))
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(axum::middleware::from_fn(check_host))
        .with_state(sidecar)
}

/// Refuses a request whose Host is not [`HOST`], on every path. rmcp checks the Host of what
/// reaches it, but `tools/call` in a session and `/v1/composition` are answered before rmcp;
/// one check in front of everything keeps the rule the same for all of them.
async fn check_host(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let host = request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok());
    let allowed = host.is_some_and(|host| {
        host == HOST
            || host
                .strip_prefix(HOST)
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
    });
    if !allowed {
        return identity::refusal(
            axum::http::StatusCode::FORBIDDEN,
            "forbidden",
            &format!(
                "the Host header must be {HOST} (connect to http://{HOST}/mcp over the socket), \
                 not {}",
                host.unwrap_or("missing")
            ),
        );
    }
    next.run(request).await
}

/// `GET /v1/composition`: the caller's composition as JSON (tools with `mutating`,
/// per-binding outcomes with `degraded` and `reasons`, instructions, skills).
///
/// Served from the caller's live session when there is one (the session named by
/// `Mcp-Session-Id`, else the caller's newest session): no new upstream connection. Otherwise
/// composed at most once per (project, caller) per [`VIEW_TTL`]; concurrent requests share
/// that one composition.
async fn composition(
    State(sidecar): State<Arc<Sidecar>>,
    Extension(views): Extension<Arc<CompositionViews>>,
    parts: Parts,
) -> Response {
    let Some(identity) = parts.extensions.get::<Identity>().cloned() else {
        return identity::refusal(
            axum::http::StatusCode::BAD_REQUEST,
            "forbidden",
            "no caller identity",
        );
    };
    let live = parts
        .extensions
        .get::<SessionTask>()
        .map(|SessionTask(task)| task.clone())
        .or_else(|| sidecar.sessions.live_task(&identity.fingerprint()));
    if let Some(task) = live {
        return axum::Json(composition_view(&identity.project, task.composed())).into_response();
    }
    let Some(cell) = views.cell(identity.fingerprint()).await else {
        return identity::refusal(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "too many callers are inspecting compositions at once; retry in a few seconds",
        );
    };
    let body = cell
        .get_or_init(|| async {
            let task = sidecar.compose(&identity).await;
            let body = composition_view(&identity.project, &task.composed);
            task.composed.close().await;
            body
        })
        .await;
    axum::Json(body.clone()).into_response()
}

/// The JSON view of a composition.
fn composition_view(project: &str, composed: &Composed) -> Value {
    let composition = &composed.composition;
    let mut body = serde_json::to_value(composition).unwrap_or(Value::Null);
    if let Some(bindings) = body.get_mut("bindings").and_then(Value::as_array_mut) {
        for (view, outcome) in bindings.iter_mut().zip(&composition.bindings) {
            view["degraded"] = json!(outcome.degraded());
            view["reasons"] = json!(outcome.reasons());
        }
    }
    body["project"] = json!(project);
    body["builtins"] = if composition.skills.is_empty() {
        json!([])
    } else {
        json!([LOAD_SKILL])
    };
    body
}

/// How long a composition made for inspection answers the same caller. 5 s: long enough that
/// a burst of inspections (a dashboard, a retry loop) composes once, short enough that an
/// edited binding shows on the next look.
pub const VIEW_TTL: Duration = Duration::from_secs(5);

/// Compositions made for `GET /v1/composition` outside a session, per caller (digest of
/// project and token), each kept for [`VIEW_TTL`] from the moment it was started.
struct CompositionViews {
    entries: tokio::sync::Mutex<HashMap<[u8; 32], View>>,
    /// Callers held at most (the session cap: no more callers than sessions are expected).
    capacity: usize,
}

struct View {
    started: tokio::time::Instant,
    answer: Arc<tokio::sync::OnceCell<Value>>,
}

impl CompositionViews {
    fn new(capacity: usize) -> Self {
        Self {
            entries: tokio::sync::Mutex::default(),
            capacity: capacity.max(1),
        }
    }

    /// The caller's composition in the making or made within [`VIEW_TTL`], or a new empty
    /// one; none when `capacity` other callers hold fresh ones.
    async fn cell(&self, caller: [u8; 32]) -> Option<Arc<tokio::sync::OnceCell<Value>>> {
        let mut entries = self.entries.lock().await;
        if let Some(view) = entries.get(&caller)
            && view.started.elapsed() < VIEW_TTL
        {
            return Some(view.answer.clone());
        }
        entries.retain(|_, view| view.started.elapsed() < VIEW_TTL);
        if entries.len() >= self.capacity {
            return None;
        }
        let answer = Arc::new(tokio::sync::OnceCell::new());
        entries.insert(
            caller,
            View {
                started: tokio::time::Instant::now(),
                answer: answer.clone(),
            },
        );
        Some(answer)
    }
}

/// How long an rmcp session may exist without a binding before it is closed. A binding is
/// made when `initialize` answers; a client that goes away while its `initialize` is still
/// composing leaves a session nobody bound (rmcp's own keep-alive is off, see `router`).
/// Generous: composing may wait for upstream and knowledge timeouts.
const ORPHAN_GRACE: Duration = Duration::from_secs(60);

/// Closes sessions idle for `idle`: unbinds them (later requests are not served) and ends the
/// rmcp session, which drops the task and closes its upstreams.
async fn reap_idle(sessions: Arc<Sessions>, manager: Arc<LocalSessionManager>, idle: Duration) {
    let period = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut orphans = HashMap::new();
    loop {
        tick.tick().await;
        reap_once(&sessions, &manager, idle, &mut orphans).await;
    }
}

/// One pass of the reaper: idle bound sessions, then rmcp sessions unbound for longer than
/// [`ORPHAN_GRACE`] (`orphans` remembers since when each was seen unbound).
async fn reap_once(
    sessions: &Sessions,
    manager: &LocalSessionManager,
    idle: Duration,
    orphans: &mut HashMap<SessionId, tokio::time::Instant>,
) {
    for id in sessions.idle(idle) {
        sessions.remove(&id);
        close(manager, &id.as_str().into(), "idle").await;
    }
    let live: Vec<SessionId> = manager.sessions.read().await.keys().cloned().collect();
    orphans.retain(|id, _| live.contains(id));
    let grace = ORPHAN_GRACE.max(idle);
    for id in live {
        if sessions.is_bound(&id) {
            orphans.remove(&id);
            continue;
        }
        let since = *orphans
            .entry(id.clone())
            .or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= grace {
            orphans.remove(&id);
            close(manager, &id, "never bound").await;
        }
    }
}

async fn close(manager: &LocalSessionManager, id: &SessionId, why: &str) {
    if let Err(error) = manager.close_session(id).await {
        tracing::warn!(%error, why, "closing a session");
    }
    tracing::info!(why, "session closed");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::HeaderName;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_session_nobody_bound_should_be_closed_after_the_grace() {
        let sessions = Sessions::new(HeaderName::from_static("x-capstan-project"), 4);
        let manager = LocalSessionManager::default();
        let (id, _transport) = manager.create_session().await.unwrap();
        let mut orphans = HashMap::new();
        let idle = Duration::from_secs(1);
        reap_once(&sessions, &manager, idle, &mut orphans).await;
        assert!(manager.has_session(&id).await.unwrap(), "closed too early");
        tokio::time::advance(ORPHAN_GRACE / 2).await;
        reap_once(&sessions, &manager, idle, &mut orphans).await;
        assert!(manager.has_session(&id).await.unwrap(), "closed too early");
        tokio::time::advance(ORPHAN_GRACE / 2).await;
        reap_once(&sessions, &manager, idle, &mut orphans).await;
        assert!(!manager.has_session(&id).await.unwrap(), "still open");
        assert!(orphans.is_empty());
    }
}
