//! The gate's unit tests: classification, the Host check and session binding.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderName, HeaderValue};

use capstan_api::wire::MCP_PROTOCOL_VERSION;

use super::*;

/// A router whose only handler counts what reaches it.
fn counting() -> (axum::Router, Arc<AtomicU64>) {
    let reached = Arc::new(AtomicU64::new(0));
    let counter = reached.clone();
    let router = axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { "served" }
    });
    (router, reached)
}

/// What serves the requests the gate lets through in these tests: it counts them and answers
/// "served".
fn counting_serve() -> (Serve, Arc<AtomicU64>) {
    let reached = Arc::new(AtomicU64::new(0));
    let counter = reached.clone();
    let serve: Serve = Arc::new(move |_request| {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { "served".into_response() })
    });
    (serve, reached)
}

/// The gate in front of [`counting_serve`].
fn guarded(tasks: &Arc<Tasks>) -> (axum::Router, Arc<AtomicU64>) {
    gated(tasks, None)
}

/// The gate in front of [`counting_serve`], callers without a session served by tasks
/// `starter` starts.
fn gated(tasks: &Arc<Tasks>, starter: Option<Arc<TaskStarter>>) -> (axum::Router, Arc<AtomicU64>) {
    let (serve, reached) = counting_serve();
    let gate = Gate {
        tasks: tasks.clone(),
        starter,
        serve,
        tracing: Default::default(),
    };
    (
        axum::Router::new().fallback(check).with_state(gate),
        reached,
    )
}

fn sessions() -> Arc<Tasks> {
    capped(crate::caller::admission::Caps::default())
}

fn capped(caps: crate::caller::admission::Caps) -> Arc<Tasks> {
    Arc::new(Tasks::new(
        crate::caller::admission::Admission::new(
            HeaderName::from_static("x-capstan-project"),
            caps,
        ),
        crate::tasks::Lifetimes::default(),
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
        // The TypeScript SDK's servers' code for it, written out: clients match on it.
        assert_eq!(body["error"]["code"], -32001);
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
    // 2026-07-28 with a project and token passes, carrying the caller on to the edge.
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

/// With the caller check on (`CAPSTAN_CALLER_CHECK=sar`), a caller the project's plane does
/// not vouch for never reaches the edge and holds no place: no token is refused at once (401); a
/// plane that cannot be asked (here: nothing listens) refuses (503), it never admits.
#[tokio::test]
async fn a_caller_the_plane_does_not_vouch_for_should_never_pass() {
    use tower::ServiceExt as _;
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = crate::observe::metrics::Metrics::register(&mut registry);
    let check = crate::caller::check::CallerCheck::new(
        capstan_core::control_plane::ControlPlane::new(config, None),
        metrics.clone(),
        crate::caller::check::CALLER_CHECK_TTL,
    );
    let admission = crate::caller::admission::Admission::with(
        HeaderName::from_static("x-capstan-project"),
        crate::caller::admission::Caps::default(),
        Some(Arc::new(check)),
        Some(metrics),
    );
    let tasks = Arc::new(Tasks::new(
        admission.clone(),
        crate::tasks::Lifetimes::default(),
    ));
    let (router, reached) = guarded(&tasks);
    let mut tokenless = sessionless(MODERN_LIST, Some("p"), "2026-07-28");
    tokenless.headers_mut().remove(header::AUTHORIZATION);
    for (request, status) in [
        (tokenless, StatusCode::UNAUTHORIZED),
        (
            sessionless(MODERN_LIST, Some("p"), "2026-07-28"),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ] {
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), status);
    }
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "a refused caller reached the edge"
    );
    assert_eq!(admission.held(), 0, "a refused caller holds a place");
    // What /metrics shows of it: both checks by outcome, the client error by status.
    let mut shown = String::new();
    prometheus_client::encoding::text::encode(&mut shown, &registry).unwrap();
    for line in [
        "caller_checks_total{outcome=\"no_token\"} 1",
        "caller_checks_total{outcome=\"error\"} 1",
        "requests_refused_total{code=\"401\"} 1",
    ] {
        assert!(shown.lines().any(|l| l.ends_with(line)), "{line}:\n{shown}");
    }
}

/// A body of exactly 4 MiB (`MAX_BODY_BYTES`) is read; one byte more is refused with 413
/// before it reaches the edge.
#[tokio::test]
async fn a_body_should_be_read_up_to_exactly_four_mebibytes() {
    use tower::ServiceExt as _;
    let sessions = sessions();
    let (router, reached) = guarded(&sessions);
    let sized = |size: usize| {
        let head = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"pad":""#;
        let tail = r#""}}"#;
        let body = format!("{head}{}{tail}", "x".repeat(size - head.len() - tail.len()));
        assert_eq!(body.len(), size);
        sessionless(&body, Some("p"), "2026-07-28")
    };
    let response = router
        .clone()
        .oneshot(sized(4 * 1024 * 1024))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(reached.load(Ordering::SeqCst), 1);
    let response = router.oneshot(sized(4 * 1024 * 1024 + 1)).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        reached.load(Ordering::SeqCst),
        1,
        "an oversized body reached the edge"
    );
}

/// Only `localhost`, with or without a port of digits, passes the Host check, on every path;
/// anything else is refused with 403 naming what to send, before any handler.
#[tokio::test]
async fn only_a_localhost_host_should_pass() {
    use tower::ServiceExt as _;
    let (router, reached) = counting();
    let router = router.layer(axum::middleware::from_fn(check_host));
    let request = |host: Option<&str>| {
        let mut request = Request::builder().uri("/v1/composition");
        if let Some(host) = host {
            request = request.header(header::HOST, host);
        }
        request.body(Body::empty()).unwrap()
    };
    for host in ["localhost", "localhost:80", "localhost:7810"] {
        let response = router.clone().oneshot(request(Some(host))).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{host}");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 3);
    for host in [
        Some("localhost:"),
        Some("localhost:8a"),
        Some("localhost.evil.example"),
        Some("localhostx"),
        Some("evil.example"),
        None,
    ] {
        let response = router.clone().oneshot(request(host)).await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{host:?}");
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body["error"]["message"],
            format!(
                "the Host header must be localhost (connect to http://localhost/mcp over the \
                 socket), not {}",
                host.unwrap_or("missing")
            ),
            "{host:?}"
        );
    }
    assert_eq!(
        reached.load(Ordering::SeqCst),
        3,
        "a refused Host reached a handler"
    );
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

/// A minted session id is 128 bits as 32 lowercase hex digits, a new one each time.
#[test]
fn a_session_id_should_be_128_random_bits_in_hex() {
    let ids: Vec<String> = (0..3).map(|_| session_id().unwrap()).collect();
    for id in &ids {
        assert_eq!(id.len(), 32, "{id}");
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{id}"
        );
    }
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
}

#[test]
fn only_initialize_should_open_a_session() {
    let initialize = |text: &str| Message::parse(text.as_bytes()).unwrap().is_initialize();
    assert!(initialize(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#
    ));
    assert!(initialize(
        r#"[{"jsonrpc":"2.0","id":1,"method":"initialize"}]"#
    ));
    assert!(initialize(r#"{"params":{},"method":"initialize","id":1}"#));
    assert!(!initialize(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#
    ));
    assert!(!initialize(
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]"#
    ));
    assert!(!initialize(
        r#"{"jsonrpc":"2.0","id":1,"method":["initialize"]}"#
    ));
    assert!(!initialize(r#""not a message""#));
}

mod sessions;
