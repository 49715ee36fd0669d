//! The per-request checks in front of everything on the socket: the Host, the caller's
//! identity on every request, and for MCP requests the session — a session id must name a
//! session bound to this caller; `initialize` is admitted within the session cap and bound to
//! its caller when it answers.
//!
//! With a caller check configured (`caller_check.rs`), an `initialize` and a composition read
//! outside a session are admitted only for a caller the project's control plane admits.
//!
//! An MCP request without a session must be an `initialize`, or a request of the 2026-07-28
//! revision (which has no sessions, `mcp.rs`): such a request is checked like an `initialize`
//! — caller check included — on every request, and served by the caller's own task
//! (`sessionless.rs`), so no tool call slips past the identity by skipping `initialize`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use capstan_api::wire::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID, SOCKET_HOST};
use futures::StreamExt as _;
use rmcp::model::ProtocolVersion;
use serde_json::json;
use tracing::error;

use crate::identity::{Identity, refusal};
use crate::sessionless::SessionlessTasks;
use crate::sessions::{Lookup, Sessions, TaskSlot};
use crate::task::Task;

/// Largest request body the sidecar reads. 4 MiB: far above any tool call's arguments, small
/// enough that a runaway client cannot make the sidecar buffer much.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How long a refused request's body is read before the refusal is sent anyway: a client
/// still writing after this is too slow to wait for.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The JSON-RPC error code of [`session_not_found`] (the TypeScript SDK's servers use it).
pub const SESSION_NOT_FOUND_CODE: i64 = -32001;

/// The live task of the session a request belongs to, for the handlers after the middleware.
#[derive(Clone)]
pub struct SessionTask(pub Arc<Task>);

/// The task of the caller of a request without a session (2026-07-28), resolved by the
/// middleware, for the rmcp handler (which still checks the caller against it).
#[derive(Clone)]
pub struct CallerTask(pub Arc<Task>);

/// The JSON-RPC message of an MCP POST, parsed once by the middleware.
#[derive(Clone, Debug)]
pub struct Message(pub serde_json::Value);

/// Sends `refusal` once the request's `body` has been read (at most [`MAX_BODY_BYTES`], for at
/// most [`DRAIN_TIMEOUT`]) and dropped. A refusal sent before the body is read makes the
/// server close the connection while a client that writes its headers and body separately
/// (Python's `http.client`) is still writing: it sees a broken pipe, never the refusal.
pub async fn after_body(body: Body, refusal: Response) -> Response {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES)).await;
    refusal
}

/// Refuses a request whose Host is not `localhost`, on every path. rmcp checks the Host of
/// what reaches it, but `tools/call` in a session and `/v1/composition` are answered before
/// rmcp; one check in front of everything keeps the rule the same for all of them.
pub async fn check_host(request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    let allowed = host.is_some_and(|host| {
        host == SOCKET_HOST
            || host
                .strip_prefix(SOCKET_HOST)
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
    });
    if !allowed {
        let refused = refusal(
            StatusCode::FORBIDDEN,
            "forbidden",
            &format!(
                "the Host header must be {SOCKET_HOST} (connect to http://{SOCKET_HOST}/mcp over \
                 the socket), not {}",
                host.unwrap_or("missing")
            ),
        );
        return after_body(request.into_body(), refused).await;
    }
    next.run(request).await
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

fn unreadable_table() -> Response {
    error!("the session table is unreadable (a panic poisoned its lock)");
    refusal(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the sidecar cannot check this session; nothing was served",
    )
}

/// Whether an MCP POST without a session is of a revision without sessions (2026-07-28 on):
/// its `MCP-Protocol-Version` header or its `_meta` names one, or it is `server/discover`.
/// rmcp then checks the header against the `_meta`, the method and the name.
fn is_sessionless(headers: &axum::http::HeaderMap, message: &serde_json::Value) -> bool {
    // Revisions are dates, so they compare as strings (as rmcp compares them).
    let modern = |version: &str| version >= ProtocolVersion::NO_INITIALIZE.as_str();
    let header = headers
        .get(MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(modern);
    let meta = message["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"]
        .as_str()
        .is_some_and(modern);
    header || meta || message["method"] == "server/discover"
}

/// Whether a JSON-RPC message is an `initialize` request (alone or first in a batch).
fn is_initialize(value: &serde_json::Value) -> bool {
    let first = match value {
        serde_json::Value::Array(items) => items.first(),
        other => Some(other),
    };
    first.is_some_and(|m| m["method"] == "initialize")
}

/// What the identity middleware consults: the session table (with the admission and the
/// caller check) and the tasks of callers without a session.
#[derive(Clone)]
pub struct Gate {
    /// The bound sessions.
    pub sessions: Arc<Sessions>,
    /// The tasks of callers without a session; `None` where none are served (unit tests).
    pub sessionless: Option<Arc<SessionlessTasks>>,
}

/// `response` with `held` kept alive until its body has been sent or dropped: a stream's place
/// and count are given back when the client leaves.
fn holding<T: Send + Sync + 'static>(response: Response, held: T) -> Response {
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _kept = &held;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// The identity check on every request; session binding, admission and stream counting for
/// MCP requests; the caller check for new tasks, reads outside a session, and — once the
/// caller's cached answer is older than its TTL — every request of a live session.
pub async fn check(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let sessions = &gate.sessions;
    let identity = match Identity::from_headers(request.headers(), sessions.project_header()) {
        Ok(identity) => identity,
        Err(refused) => return after_body(request.into_body(), refused.into_response()).await,
    };
    let session = request
        .headers()
        .get(MCP_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let is_mcp = request.uri().path() == "/mcp" || request.uri().path().starts_with("/mcp/");

    let (mut parts, body) = request.into_parts();
    let mut initialize = false;
    let mut modern = false;
    let mut sessionless = false;
    let mut listen = false;
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
        modern = is_sessionless(&parts.headers, &message);
        sessionless = session.is_none() && !initialize && modern;
        listen = sessionless && message["method"] == "subscriptions/listen";
        if session.is_none() && !initialize && !sessionless {
            return refusal(
                StatusCode::BAD_REQUEST,
                "forbidden",
                "no MCP session: send `initialize` first (the sidecar binds your project and \
                 token to the session it creates), then the Mcp-Session-Id it returns; or speak \
                 2026-07-28, whose requests each carry MCP-Protocol-Version and their _meta",
            );
        }
        parts.extensions.insert(Message(message));
        Body::from(bytes)
    } else if is_mcp && session.is_none() {
        let refused = refusal(
            StatusCode::BAD_REQUEST,
            "forbidden",
            "no MCP session: send `initialize` first",
        );
        return after_body(body, refused).await;
    } else {
        body
    };

    // Fail closed: a session id must name a bound session of this caller. An id the table
    // does not know (made up, reaped, or an `initialize` that never bound) is gone as far as
    // this caller is concerned, whatever rmcp still holds.
    let mut bound = None;
    if let Some(id) = &session {
        match sessions.lookup(id) {
            Err(_) => return after_body(body, unreadable_table()).await,
            Ok(Lookup::Unbound) => return after_body(body, session_not_found()).await,
            Ok(Lookup::Bound(fingerprint, _)) if fingerprint != identity.fingerprint() => {
                let refused = refusal(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "this session belongs to another project or caller: the project and token \
                     must be the ones sent with `initialize`",
                );
                return after_body(body, refused).await;
            }
            Ok(Lookup::Bound(_, task)) => {
                task.touch();
                bound = Some(task);
            }
        }
    }

    // Checked once the session is known to be the caller's: a revision without sessions has
    // no place inside one.
    if session.is_some() && modern {
        return refusal(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "a request of MCP-Protocol-Version 2026-07-28 carries no Mcp-Session-Id: inside a \
             session, send the revision negotiated at initialize",
        );
    }

    // The caller against the project: for a new session or task, a read outside one
    // (composition, routes, decisions), and every request of a live session — answered from
    // the cache until its TTL, then asked again, so a revoked caller's session ends.
    if let Some(caller_check) = sessions.caller_check()
        && let Err(refused) = caller_check.check(&identity).await
    {
        if refused.is_denial() {
            if let Some(id) = &session {
                sessions.end(id);
            }
            if let Some(tasks) = &gate.sessionless {
                tasks.end(&identity.fingerprint()).await;
            }
        }
        return after_body(body, refused.into_response()).await;
    }

    let slot = TaskSlot::default();
    // A place for what this request opens: a session, a task without one, a stream.
    if initialize || sessionless {
        let needs_task = if initialize {
            true
        } else {
            match &gate.sessionless {
                Some(tasks) => !tasks.has_task(&identity).await,
                None => true,
            }
        };
        if needs_task {
            match sessions.admit(&identity) {
                Ok(place) => slot.offer(place),
                Err(full) => return full.into_response(),
            }
        }
        parts.extensions.insert(slot.clone());
    }
    // A request without a session is served by its caller's task, resolved (composed, the
    // first time) here, so its streams are counted before it is handed on.
    let caller_task = match (&gate.sessionless, sessionless) {
        (Some(tasks), true) => match tasks.task(&identity, slot.take_permit()).await {
            Ok(task) => Some(task),
            Err(error) => {
                return refusal(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    &error.message,
                );
            }
        },
        _ => None,
    };
    // A stream — a session's GET stream, a `subscriptions/listen` — counts against its task's
    // streams and takes a place, both held while the stream is open.
    let stream_task = match (&bound, &caller_task) {
        (Some(task), _) if parts.method == Method::GET && is_mcp => Some(task),
        (_, Some(task)) if listen => Some(task),
        _ => None,
    };
    let stream = match stream_task {
        Some(task) => {
            let stream = match task.open_stream(sessions.admission().caps().streams_per_task) {
                Ok(stream) => stream,
                Err(full) => {
                    sessions.admission().refused(&full);
                    return full.into_response();
                }
            };
            match sessions.admit(&identity) {
                Ok(place) => Some((stream, place)),
                Err(full) => return full.into_response(),
            }
        }
        None => None,
    };
    if let Some(task) = caller_task {
        parts.extensions.insert(CallerTask(task));
    }
    if let Some(task) = bound {
        parts.extensions.insert(SessionTask(task));
    }
    let fingerprint = identity.fingerprint();
    parts.extensions.insert(identity);
    let delete = parts.method == Method::DELETE;
    let mut response = next.run(Request::from_parts(parts, body)).await;

    // A session is bound when its `initialize` made a task; one that made none stays unbound,
    // and every later request naming it is refused (404), never served unchecked.
    if initialize
        && response.status().is_success()
        && let Some(id) = response
            .headers()
            .get(MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
        && let Some(task) = slot.task()
        && sessions.bind(id, fingerprint, &task).is_err()
    {
        error!("the session table is unreadable; the new session stays unbound");
    }
    if delete
        && response.status().is_success()
        && let Some(id) = &session
    {
        sessions.remove(id);
    }
    // A finished DELETE has no body to accept later: 204 is what clients expect (the Python
    // SDK warns on anything but 200 or 204).
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    if let Some(held) = stream {
        response = holding(response, held);
    }
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use axum::http::{HeaderName, HeaderValue};

    use super::*;

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
                Gate {
                    sessions: sessions.clone(),
                    sessionless: None,
                },
                check,
            ));
        (router, reached)
    }

    fn sessions() -> Arc<Sessions> {
        Arc::new(Sessions::new(
            HeaderName::from_static("x-capstan-project"),
            crate::admission::Admission::new(crate::admission::Caps::default()),
        ))
    }

    fn in_session(id: &str, body: &str) -> Request {
        Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header("x-capstan-project", "p")
            .header(header::AUTHORIZATION, "Bearer t")
            .header(MCP_SESSION_ID, id)
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

    #[tokio::test]
    async fn a_session_id_that_is_not_bound_should_never_pass() {
        use tower::ServiceExt as _;
        let sessions = sessions();
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
                .header(MCP_SESSION_ID, "made-up")
                .body(Body::empty())
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
        }
        assert_eq!(reached.load(Ordering::SeqCst), 0);
    }

    fn sessionless(body: &str, project: Option<&str>, version: &str) -> Request {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header(header::AUTHORIZATION, "Bearer t")
            .header(MCP_PROTOCOL_VERSION, version);
        if let Some(project) = project {
            request = request.header("x-capstan-project", project);
        }
        request.body(Body::from(body.to_owned())).unwrap()
    }

    const MODERN_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    #[tokio::test]
    async fn a_request_without_a_session_should_pass_only_as_2026_07_28_with_an_identity() {
        use tower::ServiceExt as _;
        let sessions = sessions();
        let (router, reached) = guarded(&sessions);
        // A session revision without its session, or 2026-07-28 without a project: refused.
        for request in [
            sessionless(LIST, Some("p"), "2025-11-25"),
            sessionless(MODERN_LIST, None, "2026-07-28"),
            sessionless(MODERN_LIST, Some("Not A Project"), "2026-07-28"),
        ] {
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        }
        assert_eq!(reached.load(Ordering::SeqCst), 0);
        // 2026-07-28 with a project and token passes, carrying the caller on to rmcp.
        let response = router
            .clone()
            .oneshot(sessionless(MODERN_LIST, Some("p"), "2026-07-28"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(reached.load(Ordering::SeqCst), 1);
        // Inside a bound session, a revision without sessions is refused.
        let mut request = sessionless(MODERN_LIST, Some("p"), "2026-07-28");
        request
            .headers_mut()
            .insert(MCP_SESSION_ID, HeaderValue::from_static("made-up"));
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::NOT_FOUND,
            "unbound ids stay 404"
        );
        assert_eq!(reached.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_poisoned_session_table_should_refuse_with_500_not_pass() {
        use tower::ServiceExt as _;
        let sessions = sessions();
        sessions.poison();
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
