//! The gate: the per-request checks in front of everything on the socket — the Host, the
//! caller's identity on every request, and for MCP requests the session (a session id must
//! name a session bound to this caller; `initialize` is admitted within the session cap and
//! bound to its caller when it answers) — after which a request goes on as one
//! [`EdgeRequest`] to what serves it (`edge.rs`).
//!
//! With a caller check configured (`caller/check.rs`), an `initialize` and a composition read
//! outside a session are admitted only for a caller the project's control plane admits.
//!
//! An MCP request without a session must be an `initialize`, or a request of the 2026-07-28
//! revision (which has no sessions): such a request is checked like an `initialize`
//! — caller check included — on every request, and served by the caller's own task
//! (`tasks.rs`), so no tool call slips past the identity by skipping `initialize`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use capstan_api::wire::{MCP_SESSION_ID, SOCKET_HOST};
use capstan_upstream::trace_context::in_unsampled;
use futures::StreamExt as _;
use futures::future::Either;
use serde_json::json;
use tracing::{Instrument as _, Span, error};

mod classify;
mod large;

use self::classify::{Kind, classify, read_message};
use self::large::LARGE_BODY_BYTES;
use super::request::{Checked, EdgeRequest, Refused, Serve};
use crate::caller::admission::{Full, Place};
use crate::caller::identity::{Identity, refusal};
use crate::message::Message;
use crate::observe::request_span::{RequestTrace, RequestTracing, answered, describe};
use crate::task::{ANOTHER_CALLER, OpenStream, Task};
use crate::tasks::{Admitted, Lookup, TaskKey, TaskStarter, Tasks};

/// Largest request body the sidecar reads. 4 MiB: far above any tool call's arguments, small
/// enough that a runaway client cannot make the sidecar buffer much.
pub(crate) const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How long a refused request's body is read before the refusal is sent anyway: a client
/// still writing after this is too slow to wait for.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The JSON-RPC error code of [`session_not_found`] (the TypeScript SDK's servers use it).
pub(crate) const SESSION_NOT_FOUND_CODE: i64 = -32001;

/// Sends `refusal` once the request's `body` has been read (at most [`MAX_BODY_BYTES`], for at
/// most [`DRAIN_TIMEOUT`]) and dropped. A refusal sent before the body is read makes the
/// server close the connection while a client that writes its headers and body separately
/// (Python's `http.client`) is still writing: it sees a broken pipe, never the refusal.
pub(crate) async fn after_body(body: Body, refusal: Response) -> Response {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES)).await;
    refusal
}

/// Refuses a request whose Host is not `localhost`, on every path: one check in front of
/// everything keeps the rule the same for all of them.
pub(crate) async fn check_host(request: Request, next: Next) -> Response {
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
pub(crate) fn session_not_found() -> Response {
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

/// What the gate consults — the task registry (with its admission) and what starts a caller's
/// task without a session — and what serves the requests it lets through.
#[derive(Clone)]
pub(crate) struct Gate {
    /// Every live task, and who may open what.
    pub(crate) tasks: Arc<Tasks>,
    /// Starts tasks of callers without a session; `None` where none are served (unit tests).
    pub(crate) starter: Option<Arc<TaskStarter>>,
    /// Serves what the gate lets through (`Edge::dispatch`).
    pub(crate) serve: Serve,
    /// Decides whether a request is traced, before any span of it is built.
    pub(crate) tracing: RequestTracing,
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

fn refused_by(full: Full) -> Refused {
    Box::new(full.into_response())
}

/// The live task of session `id`, if it is `identity`'s. Fails closed: an id the registry
/// does not know (made up, reaped, or an `initialize` that never bound) is gone as far as
/// this caller is concerned.
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
/// counted before they are served), and the stream it opens (its count and place, held by
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
    // A caller's live task without a session needs nothing admitted: the edge serves the task
    // resolved below, and only `initialize` reads what is admitted back.
    let admitted = if needs_place {
        Some(Admitted::with_place(
            admission.admit(identity).map_err(refused_by)?,
        ))
    } else {
        None
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
/// admitted; then served; after the answer, a new session bound and an ended one forgotten.
/// All of it in the request's span (`observe/request_span.rs`), or, for a request its head
/// sampler left out, in none.
pub(crate) async fn check(State(gate): State<Gate>, request: Request) -> Response {
    let tasks = gate.tasks.clone();
    let (response, span) = checked(gate, request).await;
    answered(&span, &response);
    if response.status().is_client_error()
        && let Some(metrics) = tasks.admission().metrics()
    {
        metrics.request_refused(response.status().as_u16());
    }
    response
}

/// [`check`]'s work, and the request's span.
async fn checked(gate: Gate, request: Request) -> (Response, Span) {
    let admission = gate.tasks.admission();
    let identity = match Identity::from_headers(request.headers(), admission.project_header()) {
        Ok(identity) => identity,
        Err(refused) => {
            let span = gate.tracing.begin(request.headers(), None).span;
            return (
                after_body(request.into_body(), refused.into_response()).await,
                span,
            );
        }
    };
    let session = request
        .headers()
        .get(MCP_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let is_mcp = request.uri().path() == "/mcp" || request.uri().path().starts_with("/mcp/");
    let (parts, body) = request.into_parts();
    let (body, message, large) = if is_mcp && parts.method == Method::POST {
        match read_message(body).await {
            Ok((bytes, message)) => {
                let large = bytes.len() >= LARGE_BODY_BYTES;
                (Body::from(bytes), Some(message), large)
            }
            Err(refused) => return (*refused, gate.tracing.begin(&parts.headers, None).span),
        }
    } else {
        (body, None, false)
    };
    let RequestTrace { span, unsampled } = gate.tracing.begin(&parts.headers, message.as_ref());
    describe(
        &span,
        parts.method.as_str(),
        parts.uri.path(),
        &parts.headers,
        message.as_ref(),
        session.as_deref(),
    );
    let kind = if is_mcp {
        match classify(session, &parts.method, &parts.headers, message.as_ref()) {
            Ok(kind) => kind,
            Err(refused) => return (after_body(body, *refused).await, span),
        }
    } else {
        Kind::Read { session }
    };
    let served = serve_checked(gate, kind, identity, parts, body, message).instrument(span.clone());
    // Either future as it is: an `async` block awaiting one would hold it twice over.
    let served = match unsampled {
        Some(passed) => Either::Left(in_unsampled(passed, served)),
        None => Either::Right(served),
    };
    let response = large::serve(large, served)
        .await
        .unwrap_or_else(large::stopped);
    (response, span)
}

/// [`check`] once the request is read and classified, in the request's span.
async fn serve_checked(
    gate: Gate,
    kind: Kind,
    identity: Identity,
    parts: axum::http::request::Parts,
    body: Body,
    message: Option<Message>,
) -> Response {
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
    let delete = parts.method == Method::DELETE;
    let checked = Checked {
        identity,
        session: bound,
        caller_task: opened.caller_task,
        admitted: opened.admitted.clone(),
    };
    // Its bytes, if any were read, are in `message`.
    drop(body);
    let request = EdgeRequest {
        checked,
        parts,
        message,
    };
    let response = (gate.serve)(request).await;
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

/// After the answer: a session is bound when its `initialize` made a task — under an id the
/// sidecar mints here and answers with in `Mcp-Session-Id` (one that made none gets no id, so
/// nothing is ever served unchecked) — and a DELETE is answered 204 (the Python SDK warns on
/// anything but 200 or 204).
fn settle(
    tasks: &Tasks,
    kind: &Kind,
    admitted: Option<&Admitted>,
    delete: bool,
    mut response: Response,
) -> Response {
    if *kind == Kind::Initialize
        && response.status().is_success()
        && let Some(task) = admitted.and_then(Admitted::task)
    {
        let bound = session_id().filter(|id| tasks.bind_session(id, &task).is_ok());
        match bound.and_then(|id| HeaderValue::from_str(&id).ok()) {
            Some(value) => {
                response.headers_mut().insert(MCP_SESSION_ID, value);
            }
            None => {
                error!("no session id could be minted or bound; the new session is refused");
                task.shutdown();
                return unreadable_table();
            }
        }
    }
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// A new session id: 128 random bits from the operating system, as hex (`None` if the
/// generator fails: a predictable id would collide with another session's). Unguessable,
/// though an id alone reaches nothing: every request naming it must carry the caller it is
/// bound to.
fn session_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    if let Err(error) = getrandom::fill(&mut bytes) {
        error!(%error, "the operating system's random generator failed");
        return None;
    }
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests;
