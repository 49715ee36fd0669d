//! What a request is taken for: each revision's way of saying it has no session, a stream,
//! and what is refused before anything serves it.

#![allow(clippy::unwrap_used)]

use axum::http::{HeaderMap, HeaderValue};

use super::*;

fn message(text: &str) -> Message {
    Message::parse(text.as_bytes()).unwrap()
}

fn with_version(version: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        MCP_PROTOCOL_VERSION,
        HeaderValue::from_str(version).unwrap(),
    );
    headers
}

const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
const MODERN_META: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
const OLD_META: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#;

fn sessionless(headers: &HeaderMap, text: &str) -> Result<Kind, u16> {
    classify(None, &Method::POST, headers, Some(&message(text))).map_err(|r| r.status().as_u16())
}

/// A request without a session is of 2026-07-28 when its header says so, or its `_meta`, or
/// it is `server/discover`; a revision named by either from 2026-07-28 on counts, an older one
/// does not; anything else without a session but `initialize` is refused with 400.
#[test]
fn a_request_without_a_session_should_be_served_only_as_initialize_or_2026_07_28() {
    let none = HeaderMap::new();
    let listing = Ok(Kind::Sessionless { listen: false });
    assert_eq!(sessionless(&with_version("2026-07-28"), LIST), listing);
    assert_eq!(sessionless(&with_version("2027-01-01"), LIST), listing);
    assert_eq!(sessionless(&none, MODERN_META), listing);
    assert_eq!(
        sessionless(&with_version("2025-11-25"), MODERN_META),
        listing
    );
    let discover = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#;
    assert_eq!(sessionless(&none, discover), listing);
    for (headers, text) in [
        (&none, LIST),
        (&with_version("2025-11-25"), LIST),
        (&with_version("2026-07-27"), OLD_META),
        (&none, OLD_META),
    ] {
        assert_eq!(sessionless(headers, text), Err(400), "{headers:?} {text}");
    }
    // A batch has no one `_meta` or method: only the header can say.
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"server/discover"}]"#;
    assert_eq!(sessionless(&none, batch), Err(400));
    assert_eq!(sessionless(&with_version("2026-07-28"), batch), listing);
    // `initialize` opens a session whatever the header says.
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#;
    assert_eq!(sessionless(&none, initialize), Ok(Kind::Initialize));
    assert_eq!(
        sessionless(&with_version("2026-07-28"), initialize),
        Ok(Kind::Initialize)
    );
    let no_message = classify(None, &Method::GET, &none, None).map_err(|r| r.status());
    assert_eq!(no_message, Err(StatusCode::BAD_REQUEST));
}

/// `subscriptions/listen` without a session is a stream; in a session, its GET is.
#[test]
fn streams_should_be_told_from_requests() {
    let listen = r#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen"}"#;
    assert_eq!(
        sessionless(&with_version("2026-07-28"), listen),
        Ok(Kind::Sessionless { listen: true })
    );
    let in_session = |method: Method, text: Option<&str>, headers: &HeaderMap| {
        let message = text.map(message);
        classify(Some("s".into()), &method, headers, message.as_ref()).unwrap()
    };
    let none = HeaderMap::new();
    let kind = |stream, modern| Kind::InSession {
        id: "s".into(),
        stream,
        modern,
    };
    assert_eq!(in_session(Method::GET, None, &none), kind(true, false));
    assert_eq!(
        in_session(Method::POST, Some(LIST), &none),
        kind(false, false)
    );
    assert_eq!(in_session(Method::DELETE, None, &none), kind(false, false));
    // A revision without sessions inside one is marked, to be refused once the session is
    // known to be the caller's.
    let modern = in_session(Method::POST, Some(LIST), &with_version("2026-07-28"));
    assert_eq!(modern, kind(false, true));
    assert_eq!(Kind::Read { session: None }.session(), None);
    assert_eq!(
        Kind::Read {
            session: Some("s".into())
        }
        .session(),
        Some("s")
    );
}

/// A body that is not JSON is answered with a JSON-RPC parse error (-32700), not handed on.
#[tokio::test]
async fn a_body_that_is_not_json_should_be_a_parse_error() {
    let refused = read_message(Body::from("{not json")).await.err().unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let body = axum::body::to_bytes(refused.into_body(), 4096)
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["code"], -32700);
    let (bytes, message) = read_message(Body::from(LIST)).await.unwrap();
    assert_eq!(&bytes[..], LIST.as_bytes());
    assert_eq!(
        message.single().and_then(Envelope::method),
        Some("tools/list")
    );
}
