//! The handshake against a scripted HTTP server on loopback (axum): each test's server answers
//! each method as a kind of provider would, and records what it was sent — the oracle for the
//! order of the steps and the headers each carried.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use super::*;
use crate::guard::EndpointGuard;
use crate::mcp::lane::Lanes;
use capstan_api::wire::MCP_SESSION_ID;

/// What the server was sent: each message's method and the request's `mcp-*` headers.
type Sent = Arc<Mutex<Vec<(String, Vec<(String, String)>)>>>;

/// A server on loopback answering `POST /mcp` with `answer(message)`; what it was sent.
async fn server(answer: fn(&Value) -> Response) -> (Lane, Sent) {
    let sent = Sent::default();
    let record = sent.clone();
    let app = Router::new().route(
        "/mcp",
        post(move |headers: HeaderMap, body: String| async move {
            let message: Value = serde_json::from_str(&body).unwrap();
            let mcp = headers
                .iter()
                .filter(|(name, _)| name.as_str().starts_with("mcp-"))
                .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
                .collect();
            let method = message["method"].as_str().unwrap_or("(answer)").to_owned();
            record.lock().unwrap().push((method, mcp));
            answer(&message)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let guard = EndpointGuard::new(&["127.0.0.1"]).unwrap();
    let lanes = Lanes::new(guard.resolver(), Duration::from_secs(5));
    let url = url::Url::parse(&format!("http://{address}/mcp")).unwrap();
    (Lane::new(&lanes, &url, None).unwrap(), sent)
}

fn result(message: &Value, result: Value) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result})).into_response()
}

fn error(message: &Value, code: i32, data: Value) -> Response {
    let error = json!({"code": code, "message": "no", "data": data});
    axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "error": error})).into_response()
}

fn initialized(message: &Value, version: &str) -> Response {
    let answer = result(
        message,
        json!({"protocolVersion": version, "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "scripted", "version": "1"}}),
    );
    ([(MCP_SESSION_ID, "s-1")], answer).into_response()
}

fn discovered(message: &Value, versions: Value) -> Response {
    result(
        message,
        json!({"resultType": "complete", "supportedVersions": versions,
            "capabilities": {"logging": {}}, "ttlMs": 0, "cacheScope": "private"}),
    )
}

fn methods(sent: &Sent) -> Vec<String> {
    sent.lock()
        .unwrap()
        .iter()
        .map(|(m, _)| m.clone())
        .collect()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_session_caller_should_initialize_and_keep_the_session_it_was_given() {
    let (lane, sent) = server(|message| match message["method"].as_str() {
        Some("initialize") => initialized(message, "2025-06-18"),
        _ => StatusCode::ACCEPTED.into_response(),
    })
    .await;
    let opened = open(&lane, &AtomicU64::new(1), Some(json!({"roots": {}})))
        .await
        .unwrap();
    assert_eq!(opened.revision.version(), "2025-06-18");
    assert_eq!(opened.revision.session(), Some("s-1"));
    assert!(!opened.revision.is_stateless());
    assert!(opened.capabilities.tools.is_some());
    let sent = sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 2, "{sent:?}");
    // `initialize` goes without a revision or session; the notification with both.
    assert_eq!(sent[0].0, "initialize");
    assert_eq!(sent[0].1, []);
    assert_eq!(sent[1].0, "notifications/initialized");
    assert_eq!(header(&sent[1].1, "mcp-session-id"), Some("s-1"));
    assert_eq!(
        header(&sent[1].1, "mcp-protocol-version"),
        Some("2025-06-18")
    );
}

#[tokio::test]
async fn a_session_caller_refused_initialize_by_a_2026_server_should_discover() {
    let (lane, sent) = server(|message| match message["method"].as_str() {
        Some("initialize") => error(message, -32601, Value::Null),
        Some("server/discover") => discovered(message, json!(["2026-07-28"])),
        _ => StatusCode::ACCEPTED.into_response(),
    })
    .await;
    let opened = open(&lane, &AtomicU64::new(1), Some(json!({})))
        .await
        .unwrap();
    assert!(opened.revision.is_stateless());
    assert_eq!(opened.revision.session(), None);
    assert!(opened.capabilities.logging.is_some());
    assert_eq!(methods(&sent), ["initialize", "server/discover"]);
    let sent = sent.lock().unwrap().clone();
    assert_eq!(header(&sent[1].1, "mcp-method"), Some("server/discover"));
    assert_eq!(
        header(&sent[1].1, "mcp-protocol-version"),
        Some("2026-07-28")
    );
}

#[tokio::test]
async fn a_session_caller_refused_initialize_otherwise_should_not_try_discover() {
    let (lane, sent) = server(|message| error(message, -32603, Value::Null)).await;
    let refused = open(&lane, &AtomicU64::new(1), Some(json!({})))
        .await
        .err()
        .unwrap();
    assert!(matches!(
        refused,
        HandshakeError::Refused {
            method: "initialize",
            ..
        }
    ));
    assert_eq!(methods(&sent), ["initialize"]);
}

/// A server of a session revision refusing `server/discover` with a JSON-RPC error.
fn without_discover_json(message: &Value) -> Response {
    match message["method"].as_str() {
        Some("server/discover") => error(message, -32601, Value::Null),
        Some("initialize") => initialized(message, "2025-11-25"),
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

/// A server of a session revision refusing `server/discover` with an HTTP 404 alone.
fn without_discover_http(message: &Value) -> Response {
    match message["method"].as_str() {
        Some("server/discover") => (StatusCode::NOT_FOUND, "no such method").into_response(),
        Some("initialize") => initialized(message, "2025-11-25"),
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

#[tokio::test]
async fn a_2026_caller_should_fall_back_to_initialize_when_discover_is_unknown() {
    for provider in [without_discover_json, without_discover_http] {
        let (lane, sent) = server(provider).await;
        let opened = open(&lane, &AtomicU64::new(1), None).await.unwrap();
        assert_eq!(opened.revision.version(), "2025-11-25");
        assert_eq!(opened.revision.session(), Some("s-1"));
        assert_eq!(
            methods(&sent),
            ["server/discover", "initialize", "notifications/initialized"]
        );
    }
}

#[tokio::test]
async fn a_2026_caller_refused_as_a_2026_server_refuses_should_not_fall_back() {
    // A missing client capability (-32021) is a 2026-07-28 server's refusal, and 401 is not a
    // server without discover: neither opens the upstream another way.
    for answer in [
        (|message: &Value| error(message, -32021, Value::Null)) as fn(&Value) -> Response,
        |_: &Value| (StatusCode::UNAUTHORIZED, "who are you").into_response(),
    ] {
        let (lane, sent) = server(answer).await;
        let failed = open(&lane, &AtomicU64::new(1), None).await.err().unwrap();
        assert!(
            matches!(
                failed,
                HandshakeError::Refused { .. } | HandshakeError::Status { .. }
            ),
            "{failed:?}"
        );
        assert_eq!(methods(&sent), ["server/discover"]);
    }
}

#[tokio::test]
async fn an_unsupported_version_should_be_retried_only_in_one_capstan_speaks() {
    let (lane, sent) =
        server(|message| error(message, -32022, json!({"supported": ["2027-01-01"]}))).await;
    let failed = open(&lane, &AtomicU64::new(1), None).await.err().unwrap();
    let HandshakeError::NoCommonVersion { theirs, .. } = failed else {
        panic!("{failed:?}");
    };
    assert_eq!(theirs, ["2027-01-01"]);
    assert_eq!(methods(&sent), ["server/discover"]);
}

#[tokio::test]
async fn an_answer_on_a_stream_should_be_read_past_what_comes_before_it() {
    let (lane, sent) = server(|message| match message["method"].as_str() {
        Some("initialize") => {
            let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"});
            let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "2026-07-28", "capabilities": {},
                "serverInfo": {"name": "scripted", "version": "1"}}});
            let body =
                format!("event: message\ndata: {ping}\n\nevent: message\ndata: {answer}\n\n");
            (
                [
                    (http::header::CONTENT_TYPE.as_str(), "text/event-stream"),
                    (MCP_SESSION_ID, "s-2"),
                ],
                body,
            )
                .into_response()
        }
        _ => StatusCode::ACCEPTED.into_response(),
    })
    .await;
    let opened = open(&lane, &AtomicU64::new(1), Some(json!({})))
        .await
        .unwrap();
    // Answered `initialize` with a revision without sessions: spoken to in it, on the session
    // it assigned all the same.
    assert!(opened.revision.is_stateless());
    assert_eq!(opened.revision.session(), Some("s-2"));
    let sent = sent.lock().unwrap().clone();
    assert_eq!(sent[1].0, "notifications/initialized");
    assert_eq!(
        header(&sent[1].1, "mcp-method"),
        Some("notifications/initialized")
    );
}

#[tokio::test]
async fn an_answer_to_another_request_should_be_malformed() {
    let (lane, _) = server(|_| {
        axum::Json(json!({"jsonrpc": "2.0", "id": "other", "result": {}})).into_response()
    })
    .await;
    let failed = open(&lane, &AtomicU64::new(1), Some(json!({})))
        .await
        .err()
        .unwrap();
    assert!(
        failed.to_string().contains("answers another request"),
        "{failed}"
    );
}
