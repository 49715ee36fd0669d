//! Who is calling, checked on every HTTP request.
//!
//! A task's identity is its project (a request header) and the caller's bearer token. The
//! sidecar binds both to the MCP session at `initialize` and refuses any later request of that
//! session carrying another project or token (403). A request that names no project is refused
//! (400). An MCP request without a session must be an `initialize`: the sidecar speaks only the
//! session-based protocol revisions (see `handler.rs`), so no tool call can slip past the
//! binding by skipping `initialize`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};
use tracing::error;

use crate::handler::{Task, TaskSlot};

/// The MCP session header.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// Largest request body the sidecar reads. 4 MiB: far above any tool call's arguments, small
/// enough that a runaway client cannot make the sidecar buffer much.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The caller of one request.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The project every read and call is scoped to.
    pub project: String,
    /// The caller's bearer token, never forwarded to providers.
    pub token: Option<String>,
    /// Identifies the request that created a session, so the session's end can drop its
    /// binding.
    pub nonce: u64,
    fingerprint: [u8; 32],
}

impl Identity {
    /// The identity of `project` and `token`; `nonce` tells requests apart.
    pub fn new(project: String, token: Option<String>, nonce: u64) -> Self {
        let mut digest = Sha256::new();
        digest.update(project.as_bytes());
        digest.update([0]);
        digest.update(token.as_deref().unwrap_or("").as_bytes());
        Self {
            project,
            token,
            nonce,
            fingerprint: digest.finalize().into(),
        }
    }

    /// A digest of project and token: what a session is bound to (the token itself is not
    /// kept in the binding table).
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }
}

struct Binding {
    fingerprint: [u8; 32],
    nonce: u64,
    /// The task `initialize` created (none if it failed).
    task: Weak<Task>,
    created: Instant,
}

/// What a session id names, as the binding table knows it.
enum Lookup {
    /// Bound: the identity's digest and the live task, if `initialize` made one.
    Bound([u8; 32], Option<Arc<Task>>),
    /// Not bound (never, or no longer): nothing of this session is served.
    Unbound,
}

/// The live task of the session a request belongs to, for the handlers after this middleware.
#[derive(Clone)]
pub struct SessionTask(pub Arc<Task>);

/// The JSON-RPC message of an MCP POST, parsed once by this middleware.
#[derive(Clone, Debug)]
pub struct Message(pub serde_json::Value);

/// Default cap on open sessions. 1,024: one assistant runs a handful of tasks at a time; the
/// sidecar benchmark measured ~330 KiB per session with three upstreams, so the cap bounds
/// the sidecar near a third of a GiB, and each session's upstream connections with it.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// What a client told "too many sessions" should wait before trying again: sessions end on
/// DELETE or idle, so under churn a slot frees within seconds.
pub const SESSIONS_RETRY_AFTER_SECONDS: u64 = 5;

/// A place among the open sessions, held by a session's task for its whole life (so a task
/// whose client went away mid-`initialize` still counts until the reaper ends it).
pub type SessionPermit = tokio::sync::OwnedSemaphorePermit;

/// Session id → the identity bound at `initialize`.
pub struct Sessions {
    project_header: HeaderName,
    bindings: Mutex<HashMap<String, Binding>>,
    next_nonce: AtomicU64,
    permits: Arc<tokio::sync::Semaphore>,
    max_sessions: usize,
}

impl Sessions {
    /// Bindings for requests naming their project in `project_header`, with at most
    /// `max_sessions` sessions open at once.
    pub fn new(project_header: HeaderName, max_sessions: usize) -> Self {
        Self {
            project_header,
            bindings: Mutex::new(HashMap::new()),
            next_nonce: AtomicU64::new(1),
            permits: Arc::new(tokio::sync::Semaphore::new(max_sessions)),
            max_sessions,
        }
    }

    /// The most sessions open at once.
    pub fn max_sessions(&self) -> usize {
        self.max_sessions
    }

    /// A place for a new session, or none when `max_sessions` are open.
    pub fn admit(&self) -> Option<SessionPermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// The live task bound to a session of the caller with `fingerprint`, if any (the newest
    /// binding wins), so inspection can reuse its composition.
    pub fn live_task(&self, fingerprint: &[u8; 32]) -> Option<Arc<Task>> {
        let bindings = self.bindings.lock().ok()?;
        bindings
            .values()
            .filter(|b| b.fingerprint == *fingerprint)
            .max_by_key(|b| b.created)
            .and_then(|b| b.task.upgrade())
    }

    /// What the table knows of session `id`; `Err` when the table cannot be read (its lock
    /// is poisoned), which callers must treat as a refusal.
    fn lookup(&self, id: &str) -> Result<Lookup, ()> {
        let bindings = self.bindings.lock().map_err(|_| ())?;
        Ok(match bindings.get(id) {
            Some(binding) => Lookup::Bound(binding.fingerprint, binding.task.upgrade()),
            None => Lookup::Unbound,
        })
    }

    /// The header carrying the project.
    pub fn project_header(&self) -> &HeaderName {
        &self.project_header
    }

    /// Drops the binding of the session created by the request with `nonce`.
    pub fn forget(&self, nonce: u64) {
        if let Ok(mut bindings) = self.bindings.lock() {
            bindings.retain(|_, b| b.nonce != nonce);
        }
    }

    /// Removes the binding of session `id`: later requests naming it are not served.
    pub fn remove(&self, id: &str) {
        if let Ok(mut bindings) = self.bindings.lock() {
            bindings.remove(id);
        }
    }

    /// Whether session `id` is bound.
    pub fn is_bound(&self, id: &str) -> bool {
        self.bindings
            .lock()
            .map(|b| b.contains_key(id))
            .unwrap_or(false)
    }

    /// The sessions idle for at least `limit`: their task's last request is that old (none
    /// while a call runs), or they have no task and were created that long ago.
    pub fn idle(&self, limit: Duration) -> Vec<String> {
        let Ok(bindings) = self.bindings.lock() else {
            return Vec::new();
        };
        bindings
            .iter()
            .filter(|(_, binding)| match binding.task.upgrade() {
                Some(task) => task.idle() >= limit,
                None => binding.created.elapsed() >= limit,
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// How many sessions are bound.
    pub fn len(&self) -> usize {
        self.bindings.lock().map(|b| b.len()).unwrap_or(0)
    }

    /// Whether no session is bound.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the identity of a request, or why it is refused.
    pub fn identity(&self, headers: &HeaderMap) -> Result<Identity, Refused> {
        let Some(value) = headers.get(&self.project_header) else {
            return Err(Refused {
                status: StatusCode::BAD_REQUEST,
                message: format!(
                    "the {} header is missing: every request names the project it acts in",
                    self.project_header
                ),
            });
        };
        // Bytes that are not visible ASCII cannot be a project name; show them as text.
        let project = String::from_utf8_lossy(value.as_bytes());
        let project = project.trim();
        if let Err(error) = capstan_api::check_project_name(project) {
            return Err(Refused {
                status: StatusCode::BAD_REQUEST,
                message: format!("the {} header: {error}", self.project_header),
            });
        }
        let token = match headers.get(header::AUTHORIZATION) {
            None => None,
            Some(value) => {
                let token = value
                    .to_str()
                    .ok()
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(str::trim)
                    .filter(|t| !t.is_empty());
                match token {
                    Some(token) => Some(token.to_owned()),
                    None => {
                        return Err(Refused {
                            status: StatusCode::UNAUTHORIZED,
                            message: "the Authorization header must be `Bearer <token>`".into(),
                        });
                    }
                }
            }
        };
        Ok(Identity::new(
            project.to_owned(),
            token,
            self.next_nonce.fetch_add(1, Ordering::Relaxed),
        ))
    }
}

/// Why a request's identity is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The HTTP status to answer with.
    pub status: StatusCode,
    /// What is wrong and what to send instead.
    pub message: String,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        refusal(self.status, "forbidden", &self.message)
    }
}

/// A JSON refusal body: `{"error": {"kind", "message"}}`.
pub fn refusal(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({ "error": { "kind": kind, "message": message } })),
    )
        .into_response()
}

/// The answer to a request naming a session that is not bound: 404, as MCP prescribes for a
/// session that has ended, with a JSON-RPC error body (the shape the TypeScript SDK's servers
/// send), so clients start a new session with `initialize`.
pub fn session_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({
            "jsonrpc": "2.0", "id": null,
            "error": {
                "code": SESSION_NOT_FOUND_CODE,
                "message": "Session not found: it has ended or never existed; send `initialize` \
                            to start a new one",
            }
        })),
    )
        .into_response()
}

/// The JSON-RPC error code of [`session_not_found`] (the TypeScript SDK's servers use it).
pub const SESSION_NOT_FOUND_CODE: i64 = -32001;

/// Whether a JSON-RPC message is an `initialize` request (alone or first in a batch).
fn is_initialize(value: &serde_json::Value) -> bool {
    let first = match value {
        serde_json::Value::Array(items) => items.first(),
        other => Some(other),
    };
    first.is_some_and(|m| m["method"] == "initialize")
}

/// The middleware: identity on every request; session binding for MCP requests.
pub async fn check(
    State(sessions): State<Arc<Sessions>>,
    request: Request,
    next: Next,
) -> Response {
    let identity = match sessions.identity(request.headers()) {
        Ok(identity) => identity,
        Err(refused) => return refused.into_response(),
    };
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let is_mcp = request.uri().path() == "/mcp" || request.uri().path().starts_with("/mcp/");

    let (mut parts, body) = request.into_parts();
    let mut initialize = false;
    let body = if is_mcp && parts.method == Method::POST {
        let bytes: Bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
            Ok(bytes) => bytes,
            Err(_) => {
                return refusal(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "invalid_input",
                    &format!("the request body exceeds {MAX_BODY_BYTES} bytes"),
                );
            }
        };
        // Parsed once, here: rmcp would answer a malformed body with 415, not a JSON-RPC error.
        let message = match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(message) => message,
            Err(error) => {
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({
                        "jsonrpc": "2.0", "id": null,
                        "error": { "code": -32700, "message": format!("parse error: the body is not JSON ({error})") }
                    })),
                )
                    .into_response();
            }
        };
        initialize = is_initialize(&message);
        if session.is_none() && !initialize {
            return refusal(
                StatusCode::BAD_REQUEST,
                "forbidden",
                "no MCP session: send `initialize` first (the sidecar binds your project and \
                 token to the session it creates), then the Mcp-Session-Id it returns",
            );
        }
        parts.extensions.insert(Message(message));
        Body::from(bytes)
    } else if is_mcp && session.is_none() {
        return refusal(
            StatusCode::BAD_REQUEST,
            "forbidden",
            "no MCP session: send `initialize` first",
        );
    } else {
        body
    };

    // Fail closed: a session id must name a bound session of this caller. An id the table
    // does not know (made up, ended by the reaper, or an `initialize` that never bound) is
    // gone as far as this caller is concerned, whatever rmcp still holds.
    if let Some(id) = &session {
        match sessions.lookup(id) {
            Err(()) => {
                error!("the session table is unreadable (a panic poisoned its lock)");
                return refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the sidecar cannot check this session; nothing was served",
                );
            }
            Ok(Lookup::Unbound) => return session_not_found(),
            Ok(Lookup::Bound(fingerprint, _)) if fingerprint != identity.fingerprint() => {
                return refusal(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "this session belongs to another project or caller: the project and token \
                     must be the ones sent with `initialize`",
                );
            }
            Ok(Lookup::Bound(_, task)) => {
                if let Some(task) = task {
                    task.touch();
                    parts.extensions.insert(SessionTask(task));
                }
            }
        }
    }

    let slot = TaskSlot::default();
    if initialize {
        let Some(permit) = sessions.admit() else {
            let mut response = refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                &format!(
                    "{} sessions are open, the most this sidecar serves \
                     (CAPSTAN_MAX_SESSIONS); end one (DELETE) or retry later",
                    sessions.max_sessions
                ),
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(SESSIONS_RETRY_AFTER_SECONDS),
            );
            return response;
        };
        slot.offer(permit);
        parts.extensions.insert(slot.clone());
    }
    parts.extensions.insert(identity.clone());
    let delete = parts.method == Method::DELETE;
    let mut response = next.run(Request::from_parts(parts, body)).await;

    if initialize
        && response.status().is_success()
        && let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        // A binding that cannot be written leaves the session unbound: every later request
        // naming it is refused (404), never served unchecked.
        match sessions.bindings.lock() {
            Ok(mut bindings) => {
                bindings.insert(
                    id.to_owned(),
                    Binding {
                        fingerprint: identity.fingerprint(),
                        nonce: identity.nonce,
                        task: slot.task(),
                        created: Instant::now(),
                    },
                );
            }
            Err(_) => error!("the session table is unreadable; the new session stays unbound"),
        }
    }
    if delete
        && response.status().is_success()
        && let Some(id) = &session
        && let Ok(mut bindings) = sessions.bindings.lock()
    {
        bindings.remove(id);
    }
    // A finished DELETE has no body to accept later: 204 is what clients expect (the Python
    // SDK warns on anything but 200 or 204).
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        headers
    }

    #[test]
    fn identity_should_need_a_project_and_a_well_formed_token() {
        let sessions = Sessions::new(HeaderName::from_static("x-capstan-project"), 4);
        assert_eq!(
            sessions.identity(&headers(&[])).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            sessions
                .identity(&headers(&[
                    ("x-capstan-project", "p"),
                    ("authorization", "Basic x")
                ]))
                .unwrap_err()
                .status,
            StatusCode::UNAUTHORIZED
        );
        let a = sessions
            .identity(&headers(&[
                ("x-capstan-project", "p"),
                ("authorization", "Bearer t"),
            ]))
            .unwrap();
        let b = sessions
            .identity(&headers(&[
                ("x-capstan-project", "p"),
                ("authorization", "Bearer u"),
            ]))
            .unwrap();
        let c = sessions
            .identity(&headers(&[("x-capstan-project", "p")]))
            .unwrap();
        assert_eq!((a.project.as_str(), a.token.as_deref()), ("p", Some("t")));
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_ne!(a.nonce, b.nonce);
    }

    #[test]
    fn a_project_that_is_not_a_project_name_should_be_refused_naming_the_rule() {
        let sessions = Sessions::new(HeaderName::from_static("x-capstan-project"), 4);
        let long = "a".repeat(254);
        for project in ["..", ".", "a/b", "%2e%2e", "A", "a..b", long.as_str()] {
            let refused = sessions
                .identity(&headers(&[("x-capstan-project", project)]))
                .unwrap_err();
            assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{project}");
            assert!(
                refused
                    .message
                    .starts_with("the x-capstan-project header: ")
                    && refused
                        .message
                        .ends_with(capstan_api::project::PROJECT_NAME_RULE),
                "{project}: {}",
                refused.message
            );
        }
        // Bytes outside visible ASCII (UTF-8 for "projé").
        let mut non_ascii = HeaderMap::new();
        non_ascii.insert(
            "x-capstan-project",
            HeaderValue::from_bytes("projé".as_bytes()).unwrap(),
        );
        let refused = sessions.identity(&non_ascii).unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(
            refused.message.contains("contains 'é'"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn sessions_should_be_admitted_up_to_the_cap_and_again_when_one_ends() {
        let sessions = Sessions::new(HeaderName::from_static("x-capstan-project"), 2);
        let first = sessions.admit().unwrap();
        let _second = sessions.admit().unwrap();
        assert!(sessions.admit().is_none());
        drop(first);
        assert!(sessions.admit().is_some());
    }

    /// A router whose only handler counts what reaches it, behind the identity middleware.
    fn guarded(sessions: &Arc<Sessions>) -> (axum::Router, Arc<AtomicU64>) {
        let reached = Arc::new(AtomicU64::new(0));
        let counter = reached.clone();
        let router = axum::Router::new()
            .fallback(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { "served" }
            })
            .layer(axum::middleware::from_fn_with_state(
                sessions.clone(),
                check,
            ));
        (router, reached)
    }

    fn in_session(id: &str, body: &str) -> Request {
        Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header("x-capstan-project", "p")
            .header(header::AUTHORIZATION, "Bearer t")
            .header(SESSION_HEADER, id)
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

    #[tokio::test]
    async fn a_session_id_that_is_not_bound_should_never_pass() {
        use tower::ServiceExt as _;
        let sessions = Arc::new(Sessions::new(
            HeaderName::from_static("x-capstan-project"),
            4,
        ));
        let (router, reached) = guarded(&sessions);
        for body in [LIST, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#] {
            let response = router
                .clone()
                .oneshot(in_session("made-up", body))
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["error"]["code"], SESSION_NOT_FOUND_CODE);
        }
        // GET (the stream) and DELETE name a session too.
        for method in [Method::GET, Method::DELETE] {
            let request = Request::builder()
                .method(method)
                .uri("/mcp")
                .header("x-capstan-project", "p")
                .header(SESSION_HEADER, "made-up")
                .body(Body::empty())
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
        }
        assert_eq!(reached.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_poisoned_session_table_should_refuse_with_500_not_pass() {
        use tower::ServiceExt as _;
        let sessions = Arc::new(Sessions::new(
            HeaderName::from_static("x-capstan-project"),
            4,
        ));
        let poisoner = sessions.clone();
        let _ = std::thread::spawn(move || {
            let _held = poisoner.bindings.lock();
            panic!("poisoning the session table for the test");
        })
        .join();
        assert!(sessions.bindings.is_poisoned());
        let (router, reached) = guarded(&sessions);
        let response = router.oneshot(in_session("any", LIST)).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(reached.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn only_initialize_should_open_a_session() {
        let message = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
        assert!(is_initialize(&message(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#
        )));
        assert!(is_initialize(&message(
            r#"[{"jsonrpc":"2.0","id":1,"method":"initialize"}]"#
        )));
        assert!(!is_initialize(&message(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#
        )));
        assert!(!is_initialize(&message(r#""not a message""#)));
    }
}
