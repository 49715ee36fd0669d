//! The protocol's rules on a POST, each shown on its refusal path with the status and code a
//! client reads, and on the request that passes beside it.

#![allow(clippy::unwrap_used)]

use axum::body::to_bytes;
use axum::http::HeaderValue;
use capstan_upstream::mcp::param_headers;
use rmcp::model::Tool;

use super::*;
use crate::message::Message;

const JSON_AND_EVENTS: &str = "application/json, text/event-stream";
const CAPABILITIES: &str = r#""io.modelcontextprotocol/clientCapabilities":{}"#;

fn envelope(text: &str) -> Envelope {
    match Message::parse(text.as_bytes()).unwrap() {
        Message::Single(envelope) => *envelope,
        Message::Other(other) => panic!("not one message: {other}"),
    }
}

/// Headers a well-behaved client sends, plus `extra`.
fn headers(extra: &[(&'static str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT, HeaderValue::from_static(JSON_AND_EVENTS));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in extra {
        headers.append(*name, HeaderValue::from_str(value).unwrap());
    }
    headers
}

/// A 2026-07-28 request of `method` with `params` (their `_meta` added), and the headers that
/// say what it is.
fn modern(method: &str, params: &str) -> String {
    let meta = format!(
        r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28",{CAPABILITIES}}}"#
    );
    let params = if params.is_empty() {
        format!("{{{meta}}}")
    } else {
        format!("{{{params},{meta}}}")
    };
    format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{params}}}"#)
}

fn check(headers: &HeaderMap, text: &str) -> Result<Revision, Refused> {
    check_post(headers, &envelope(text), None)
}

/// The refusal's status and, for a JSON-RPC one, its code and message.
async fn refused(result: Result<Revision, Refused>) -> (u16, i64, String) {
    let response = *result.unwrap_err();
    let status = response.status().as_u16();
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let text = String::from_utf8_lossy(&body).into_owned();
    let code = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|answer| answer["error"]["code"].as_i64())
        .unwrap_or_default();
    (status, code, text)
}

const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

#[tokio::test]
async fn a_post_should_take_both_answers_and_send_json() {
    assert!(check(&headers(&[]), LIST).is_ok());
    let mut only_json = headers(&[]);
    only_json.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    assert_eq!(refused(check(&only_json, LIST)).await.0, 406);
    // A range weighted zero is refused, not accepted; a malformed weight is ignored.
    let mut zero = headers(&[]);
    zero.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream;q=0.000"),
    );
    assert_eq!(refused(check(&zero, LIST)).await.0, 406);
    let mut odd = headers(&[]);
    odd.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json;q=0.0001, text/event-stream;q=0.5"),
    );
    assert!(check(&odd, LIST).is_ok());
    let mut text = headers(&[]);
    text.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    assert_eq!(refused(check(&text, LIST)).await.0, 415);
}

#[tokio::test]
async fn a_revision_the_sidecar_does_not_speak_should_be_refused() {
    let (status, _, body) = refused(check(
        &headers(&[("mcp-protocol-version", "2099-01-01")]),
        LIST,
    ))
    .await;
    assert_eq!(status, 400);
    assert!(
        body.contains("Unsupported MCP-Protocol-Version: 2099-01-01"),
        "{body}"
    );
    let old = check(&headers(&[("mcp-protocol-version", "2025-06-18")]), LIST).unwrap();
    assert!(!old.per_request && !old.modern);

    // An `initialize`'s header must be the revision its params ask for.
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#;
    assert!(check(&headers(&[("mcp-protocol-version", "2025-11-25")]), init).is_ok());
    let (status, code, _) = refused(check(
        &headers(&[("mcp-protocol-version", "2025-06-18")]),
        init,
    ))
    .await;
    assert_eq!((status, code), (400, -32600));

    // A revision named in `_meta` that the sidecar does not speak: -32022 with the ones it does.
    let future = modern("tools/list", "").replace("2026-07-28", "2099-01-01");
    let (status, code, body) = refused(check(
        &headers(&[
            ("mcp-protocol-version", "2099-01-01"),
            ("mcp-method", "tools/list"),
        ]),
        &future,
    ))
    .await;
    assert_eq!((status, code), (400, -32022), "{body}");
    assert!(body.contains("2025-11-25"), "{body}");
}

#[tokio::test]
async fn a_2026_07_28_request_should_say_beside_its_body_what_it_asks() {
    let version = ("mcp-protocol-version", "2026-07-28");
    let get = modern("prompts/get", r#""name":"triage""#);
    let passed = check(
        &headers(&[
            version,
            ("mcp-method", "prompts/get"),
            ("mcp-name", "triage"),
        ]),
        &get,
    )
    .unwrap();
    assert!(passed.per_request && passed.modern && !passed.meta_malformed);
    // The name Base64-wrapped says the same.
    let wrapped = ("mcp-name", "=?base64?dHJpYWdl?=");
    assert!(
        check(
            &headers(&[version, ("mcp-method", "prompts/get"), wrapped]),
            &get
        )
        .is_ok()
    );

    for (sent, says) in [
        (
            vec![version, ("mcp-name", "triage")],
            "missing required Mcp-Method",
        ),
        (
            vec![version, ("mcp-method", "prompts/get")],
            "missing required Mcp-Name",
        ),
        (
            vec![
                version,
                ("mcp-method", "tools/list"),
                ("mcp-name", "triage"),
            ],
            "does not match body method",
        ),
        (
            vec![
                version,
                ("mcp-method", "prompts/get"),
                ("mcp-name", "other"),
            ],
            "does not match body value",
        ),
        (
            vec![
                version,
                ("mcp-method", "prompts/get"),
                ("mcp-name", "=?base64?***?="),
            ],
            "not valid Base64",
        ),
        (
            vec![
                version,
                ("mcp-method", "prompts/get"),
                ("mcp-method", "prompts/get"),
                ("mcp-name", "triage"),
            ],
            "duplicate",
        ),
    ] {
        let (status, code, body) = refused(check(&headers(&sent), &get)).await;
        assert_eq!((status, code), (400, -32020), "{sent:?}: {body}");
        assert!(body.contains(says), "{sent:?}: {body}");
        assert!(body.contains(r#""id":7"#), "{body}");
    }
}

#[tokio::test]
async fn a_header_that_contradicts_the_body_should_be_refused_in_a_session_revision_too() {
    let sent = headers(&[
        ("mcp-protocol-version", "2025-11-25"),
        ("mcp-method", "tools/call"),
    ]);
    let (status, code, _) = refused(check(&sent, LIST)).await;
    assert_eq!((status, code), (400, -32020));
    // Not sending them is a session revision's right.
    assert!(check(&headers(&[("mcp-protocol-version", "2025-11-25")]), LIST).is_ok());
}

#[tokio::test]
async fn a_2026_07_28_request_should_carry_its_meta_and_agree_with_its_header() {
    let headed = |version: &'static str| {
        headers(&[
            ("mcp-protocol-version", version),
            ("mcp-method", "tools/list"),
        ])
    };
    // Sent as 2026-07-28 without the `_meta`: -32602, 400.
    let (status, code, body) = refused(check(&headed("2026-07-28"), LIST)).await;
    assert_eq!((status, code), (400, -32602), "{body}");
    assert!(
        body.contains("io.modelcontextprotocol/clientCapabilities"),
        "{body}"
    );
    // The `_meta` names a revision the header does not: -32020.
    let listed = modern("tools/list", "");
    let (status, code, _) = refused(check(&headed("2025-11-25"), &listed)).await;
    assert_eq!((status, code), (400, -32020));
    let (status, code, _) = refused(check(&headers(&[]), &listed)).await;
    assert_eq!((status, code), (400, -32020));
    // Capabilities that are not capabilities are as missing.
    let garbled = listed.replace(
        CAPABILITIES,
        r#""io.modelcontextprotocol/clientCapabilities":7"#,
    );
    let (status, code, _) = refused(check(&headed("2026-07-28"), &garbled)).await;
    assert_eq!((status, code), (400, -32602));
    assert!(check(&headed("2026-07-28"), &listed).is_ok());
}

#[tokio::test]
async fn a_call_should_carry_the_argument_headers_its_tool_asks_for() {
    let tool: Tool = serde_json::from_value(serde_json::json!({
        "name": "deploy",
        "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}
    }))
    .unwrap();
    let marks = param_headers(&[tool]).remove("deploy").unwrap();
    let call = modern(
        "tools/call",
        r#""name":"deploy","arguments":{"region":"eu-west-1"}"#,
    );
    let sent = |region: &'static str| {
        headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "deploy"),
            ("mcp-param-region", region),
        ])
    };
    assert!(check_post(&sent("eu-west-1"), &envelope(&call), Some(&marks)).is_ok());
    let (status, code, body) = refused(check_post(
        &sent("us-east-1"),
        &envelope(&call),
        Some(&marks),
    ))
    .await;
    assert_eq!((status, code), (400, -32020), "{body}");
}

#[tokio::test]
async fn a_session_stream_should_speak_a_known_revision_and_take_events() {
    let stream = |accept: &'static str, version: &'static str| {
        let mut sent = HeaderMap::new();
        sent.insert(header::ACCEPT, HeaderValue::from_static(accept));
        sent.insert(MCP_PROTOCOL_VERSION, HeaderValue::from_static(version));
        sent
    };
    assert!(check_stream(&stream("text/event-stream", "2025-11-25")).is_ok());
    assert!(check_stream(&stream("*/*", "2025-11-25")).is_ok());
    let refused_with = |result: Result<(), Refused>| result.unwrap_err().status().as_u16();
    assert_eq!(
        refused_with(check_stream(&stream("application/json", "2025-11-25"))),
        406
    );
    assert_eq!(
        refused_with(check_stream(&stream("*/*", "2099-01-01"))),
        400
    );
}
