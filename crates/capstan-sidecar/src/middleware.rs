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
//! (`tasks.rs`), so no tool call slips past the identity by skipping `initialize`.

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

use crate::admission::{Full, Place};
use crate::identity::{Identity, refusal};
use crate::task::{ANOTHER_CALLER, OpenStream, Task};
use crate::tasks::{Admitted, Lookup, TaskKey, TaskStarter, Tasks};

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

/// What the identity middleware consults: the task registry (with its admission) and what
/// starts a caller's task without a session.
#[derive(Clone)]
pub struct Gate {
    /// Every live task, and who may open what.
    pub tasks: Arc<Tasks>,
    /// Starts tasks of callers without a session; `None` where none are served (unit tests).
    pub starter: Option<Arc<TaskStarter>>,
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

/// A refusal made on the way, answered as it is (boxed: a response is large beside the
/// values the steps return).
type Refused = Box<Response>;

fn refused_by(full: Full) -> Refused {
    Box::new(full.into_response())
}

/// What a request is, decided once from its path, method, session id and (for an MCP POST)
/// its JSON-RPC message.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// `initialize`: opens a session.
    Initialize,
    /// A request naming a session: a POST in it, its GET stream, its DELETE.
    InSession {
        /// The session id.
        id: String,
        /// Whether it opens the session's GET stream.
        stream: bool,
        /// Whether it is of a revision without sessions (refused once the session is known to
        /// be the caller's: an unbound id stays 404).
        modern: bool,
    },
    /// A request of the 2026-07-28 revision, without a session.
    Sessionless {
        /// Whether it is `subscriptions/listen` (a stream).
        listen: bool,
    },
    /// Not MCP: a composition, routes or decisions read — checked against the session it
    /// names, if it names one, like any request in that session.
    Read {
        /// The session id it carries.
        session: Option<String>,
    },
}

impl Kind {
    /// The session the request names.
    fn session(&self) -> Option<&str> {
        match self {
            Kind::InSession { id, .. } => Some(id),
            Kind::Read { session } => session.as_deref(),
            Kind::Initialize | Kind::Sessionless { .. } => None,
        }
    }
}

/// Classifies an MCP request: its session id, method and message. Refuses a request the
/// sidecar serves in no way: without a session, neither `initialize` nor of 2026-07-28.
fn classify(
    session: Option<String>,
    method: &Method,
    headers: &axum::http::HeaderMap,
    message: Option<&serde_json::Value>,
) -> Result<Kind, Refused> {
    let modern = message.is_some_and(|m| is_sessionless(headers, m));
    match (session, message) {
        (Some(id), _) => Ok(Kind::InSession {
            id,
            stream: method == Method::GET,
            modern,
        }),
        (None, Some(message)) if is_initialize(message) => Ok(Kind::Initialize),
        (None, Some(message)) if modern => Ok(Kind::Sessionless {
            listen: message["method"] == "subscriptions/listen",
        }),
        (None, Some(_)) => Err(Box::new(refusal(
            StatusCode::BAD_REQUEST,
            "forbidden",
            "no MCP session: send `initialize` first (the sidecar binds your project and \
             token to the session it creates), then the Mcp-Session-Id it returns; or speak \
             2026-07-28, whose requests each carry MCP-Protocol-Version and their _meta",
        ))),
        (None, None) => Err(Box::new(refusal(
            StatusCode::BAD_REQUEST,
            "forbidden",
            "no MCP session: send `initialize` first",
        ))),
    }
}

/// Reads and parses the JSON-RPC body of an MCP POST (once: rmcp would answer a malformed body
/// with 415, not a JSON-RPC error).
async fn read_message(body: Body) -> Result<(Bytes, serde_json::Value), Refused> {
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return Err(Box::new(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_input",
            &format!("the request body exceeds {MAX_BODY_BYTES} bytes"),
        )));
    };
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(message) => Ok((bytes, message)),
        Err(error) => Err(Box::new(
            (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({
                "jsonrpc": "2.0", "id": null,
                "error": { "code": -32700, "message": format!("parse error: the body is not JSON ({error})") }
            })),
        )
            .into_response(),
        )),
    }
}

/// The live task of session `id`, if it is `identity`'s. Fails closed: an id the registry
/// does not know (made up, reaped, or an `initialize` that never bound) is gone as far as
/// this caller is concerned, whatever rmcp still holds.
fn session_task(tasks: &Tasks, id: &str, identity: &Identity) -> Result<Arc<Task>, Refused> {
    match tasks.session(id) {
        Err(_) => Err(Box::new(unreadable_table())),
        Ok(Lookup::Unbound) => Err(Box::new(session_not_found())),
        Ok(Lookup::Bound(task)) if !task.owned_by(Some(identity)) => Err(Box::new(refusal(
            StatusCode::FORBIDDEN,
            "forbidden",
            ANOTHER_CALLER,
        ))),
        Ok(Lookup::Bound(task)) => {
            task.touch();
            Ok(task)
        }
    }
}

/// The caller against the project (every request, the answer cached for its TTL): a caller
/// the plane now denies loses its task — the session named, or its task without a session.
async fn check_caller(gate: &Gate, kind: &Kind, identity: &Identity) -> Result<(), Refused> {
    let Some(caller_check) = gate.tasks.admission().caller_check() else {
        return Ok(());
    };
    let Err(refused) = caller_check.check(identity).await else {
        return Ok(());
    };
    if refused.is_denial() {
        if let Some(id) = kind.session() {
            gate.tasks.end(&TaskKey::Session(id.to_owned()));
        }
        gate.tasks.end(&TaskKey::Caller(identity.fingerprint()));
    }
    Err(Box::new(refused.into_response()))
}

/// What the request opens, admitted: the place of a new session or of a caller's first task
/// (`Admitted`), the caller's task without a session (resolved here, so its streams are
/// counted before rmcp serves them), and the stream it opens (its count and place, held by
/// the response body).
struct Opened {
    admitted: Option<Admitted>,
    caller_task: Option<Arc<Task>>,
    stream: Option<(OpenStream, Place)>,
}

async fn admit(
    gate: &Gate,
    kind: &Kind,
    identity: &Identity,
    bound: Option<&Arc<Task>>,
) -> Result<Opened, Refused> {
    let admission = gate.tasks.admission();
    let needs_place = match kind {
        Kind::Initialize => true,
        Kind::Sessionless { .. } => !gate.tasks.has_caller_task(identity),
        _ => false,
    };
    let admitted = match kind {
        Kind::Initialize | Kind::Sessionless { .. } if needs_place => Some(Admitted::with_place(
            admission.admit(identity).map_err(refused_by)?,
        )),
        Kind::Initialize | Kind::Sessionless { .. } => Some(Admitted::default()),
        _ => None,
    };
    let caller_task = match (kind, &gate.starter) {
        (Kind::Sessionless { .. }, Some(starter)) => {
            let offered = admitted.as_ref().and_then(Admitted::take_place);
            let task = gate
                .tasks
                .caller_task(identity, offered, starter)
                .await
                .map_err(|e| {
                    Box::new(refusal(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        &e.message,
                    ))
                })?;
            Some(task)
        }
        _ => None,
    };
    let stream_task = match kind {
        Kind::InSession { stream: true, .. } => bound,
        Kind::Sessionless { listen: true } => caller_task.as_ref(),
        _ => None,
    };
    let stream = match stream_task {
        Some(task) => {
            let open = task
                .open_stream(admission.caps().streams_per_task)
                .map_err(|full| {
                    admission.refused(&full);
                    refused_by(full)
                })?;
            let place = admission.admit(identity).map_err(refused_by)?;
            Some((open, place))
        }
        None => None,
    };
    Ok(Opened {
        admitted,
        caller_task,
        stream,
    })
}

/// The identity check on every request; then, for MCP requests, the request classified once,
/// its session bound to its caller, the caller checked against the project, what it opens
/// admitted; after the answer, a new session bound and an ended one forgotten.
pub async fn check(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let admission = gate.tasks.admission();
    let identity = match Identity::from_headers(request.headers(), admission.project_header()) {
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
    let (body, message) = if is_mcp && parts.method == Method::POST {
        match read_message(body).await {
            Ok((bytes, message)) => (Body::from(bytes), Some(message)),
            Err(refused) => return *refused,
        }
    } else {
        (body, None)
    };
    let kind = if is_mcp {
        match classify(session, &parts.method, &parts.headers, message.as_ref()) {
            Ok(kind) => kind,
            Err(refused) => return after_body(body, *refused).await,
        }
    } else {
        Kind::Read { session }
    };
    let bound = match kind.session() {
        Some(id) => match session_task(&gate.tasks, id, &identity) {
            Ok(task) => Some(task),
            Err(refused) => return after_body(body, *refused).await,
        },
        None => None,
    };
    // Checked once the session is known to be the caller's: a revision without sessions has
    // no place inside one.
    if let Kind::InSession { modern: true, .. } = kind {
        return refusal(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "a request of MCP-Protocol-Version 2026-07-28 carries no Mcp-Session-Id: inside a \
             session, send the revision negotiated at initialize",
        );
    }
    if let Err(refused) = check_caller(&gate, &kind, &identity).await {
        return after_body(body, *refused).await;
    }
    let opened = match admit(&gate, &kind, &identity, bound.as_ref()).await {
        Ok(opened) => opened,
        Err(refused) => return *refused,
    };
    if let Some(message) = message {
        parts.extensions.insert(Message(message));
    }
    if let Some(admitted) = &opened.admitted {
        parts.extensions.insert(admitted.clone());
    }
    if let Some(task) = opened.caller_task {
        parts.extensions.insert(CallerTask(task));
    }
    if let Some(task) = bound {
        parts.extensions.insert(SessionTask(task));
    }
    parts.extensions.insert(identity);
    let delete = parts.method == Method::DELETE;
    let response = next.run(Request::from_parts(parts, body)).await;
    let response = settle(
        &gate.tasks,
        &kind,
        opened.admitted.as_ref(),
        delete,
        response,
    );
    match opened.stream {
        Some(held) => holding(response, held),
        None => response,
    }
}

/// After the answer: a session is bound when its `initialize` made a task (one that made none
/// stays unbound, and every later request naming it is refused with 404, never served
/// unchecked); a session that answered its DELETE is forgotten, and the DELETE answered 204
/// (the Python SDK warns on anything but 200 or 204).
fn settle(
    tasks: &Tasks,
    kind: &Kind,
    admitted: Option<&Admitted>,
    delete: bool,
    mut response: Response,
) -> Response {
    if *kind == Kind::Initialize
        && response.status().is_success()
        && let Some(id) = response
            .headers()
            .get(MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
        && let Some(task) = admitted.and_then(Admitted::task)
        && tasks.bind_session(id, &task).is_err()
    {
        error!("the task registry is unreadable; the new session stays unbound");
    }
    if let Kind::InSession { id, .. } = kind
        && delete
        && response.status().is_success()
    {
        tasks.forget_session(id);
    }
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
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
    fn guarded(tasks: &Arc<Tasks>) -> (axum::Router, Arc<AtomicU64>) {
        let reached = Arc::new(AtomicU64::new(0));
        let counter = reached.clone();
        let router = axum::Router::new()
            .fallback(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { "served" }
            })
            .layer(axum::middleware::from_fn_with_state(
                Gate {
                    tasks: tasks.clone(),
                    starter: None,
                },
                check,
            ));
        (router, reached)
    }

    fn sessions() -> Arc<Tasks> {
        Arc::new(Tasks::new(
            crate::admission::Admission::new(
                HeaderName::from_static("x-capstan-project"),
                crate::admission::Caps::default(),
            ),
            crate::tasks::Lifetimes {
                session_idle: std::time::Duration::from_secs(600),
                sessionless: crate::tasks::DEFAULT_SESSIONLESS_TTL,
            },
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
