//! The exchange against a token endpoint on loopback (axum): the form RFC 8693 asks for, the
//! client's proof, and each kind of answer told apart — issued, refused (with what to fix),
//! down — without a token or secret in any message.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use tokio::net::TcpListener;

use super::*;
use crate::guard::EndpointGuard;

/// What the endpoint was sent: its Authorization header and its form.
type Sent = Arc<Mutex<Vec<(Option<String>, Vec<(String, String)>)>>>;

/// A token endpoint that records each request and answers `status` with `body`.
async fn endpoint(status: u16, body: &'static str) -> (SocketAddr, Sent) {
    let sent: Sent = Arc::default();
    let record = sent.clone();
    let app = Router::new().route(
        "/token",
        post(move |headers: HeaderMap, form: String| async move {
            let authorization = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let pairs = form_urlencoded::parse(form.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            record.lock().unwrap().push((authorization, pairs));
            (StatusCode::from_u16(status).unwrap(), body)
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, sent)
}

fn fetcher() -> Fetcher {
    capstan_core::install_crypto_provider();
    Fetcher::new(EndpointGuard::new(&["127.0.0.1"]).unwrap()).unwrap()
}

const SCOPES: &[String] = &[];

fn request<'a>(
    endpoint: &'a str,
    auth: ClientAuth<'a>,
    actor: Option<&'a str>,
) -> ExchangeRequest<'a> {
    ExchangeRequest {
        endpoint,
        subject_token: "planted-subject-token",
        subject_token_type: JWT_TOKEN_TYPE,
        audience: "mcp.streamco.example",
        scopes: SCOPES,
        actor_token: actor,
        client_id: "capstan",
        client_auth: auth,
    }
}

const ISSUED: &str = r#"{"access_token":"issued-token","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":300}"#;

#[tokio::test]
async fn an_exchange_should_send_the_form_rfc_8693_asks_for_and_read_the_token() {
    let (address, sent) = endpoint(200, ISSUED).await;
    let url = format!("http://{address}/token");
    let issued = exchange(
        &fetcher(),
        &request(
            &url,
            ClientAuth::Secret("planted-secret"),
            Some("planted-actor"),
        ),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(issued.access_token, "issued-token");
    assert_eq!(issued.expires_in, Some(Duration::from_secs(300)));
    assert!(!format!("{issued:?}").contains("issued-token"));
    let sent = sent.lock().unwrap().clone();
    let (authorization, form) = &sent[0];
    let basic = base64::engine::general_purpose::STANDARD.encode("capstan:planted-secret");
    assert_eq!(
        authorization.as_deref(),
        Some(format!("Basic {basic}").as_str())
    );
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(field("grant_type"), Some(GRANT_TYPE));
    assert_eq!(field("subject_token"), Some("planted-subject-token"));
    assert_eq!(field("subject_token_type"), Some(JWT_TOKEN_TYPE));
    assert_eq!(field("audience"), Some("mcp.streamco.example"));
    assert_eq!(field("actor_token"), Some("planted-actor"));
    assert_eq!(field("actor_token_type"), Some(JWT_TOKEN_TYPE));
    assert_eq!(field("client_assertion"), None);
}

#[tokio::test]
async fn a_client_assertion_should_go_in_the_form_not_a_header() {
    let (address, sent) = endpoint(200, ISSUED).await;
    let url = format!("http://{address}/token");
    exchange(
        &fetcher(),
        &request(&url, ClientAuth::Assertion("pod-token"), None),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let sent = sent.lock().unwrap().clone();
    let (authorization, form) = &sent[0];
    assert_eq!(authorization, &None);
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(field("client_id"), Some("capstan"));
    assert_eq!(field("client_assertion_type"), Some(JWT_BEARER_ASSERTION));
    assert_eq!(field("client_assertion"), Some("pod-token"));
    assert_eq!(field("actor_token"), None);
}

#[tokio::test]
async fn each_refusal_should_say_what_to_fix_and_never_what_was_sent() {
    let cases: [(u16, &'static str, &str, bool); 4] = [
        (
            400,
            r#"{"error":"invalid_target","error_description":"unknown audience"}"#,
            "invalid_target (unknown audience); the service does not issue",
            false,
        ),
        (
            400,
            r#"{"error":"invalid_grant","error_description":"planted-subject-token is expired"}"#,
            "invalid_grant; the service does not accept this caller's token",
            false,
        ),
        (
            401,
            r#"{"error":"invalid_client"}"#,
            "invalid_client; check the binding's client id",
            false,
        ),
        (503, "down for maintenance", "answered HTTP 503", true),
    ];
    for (status, body, expected, transient) in cases {
        let (address, _) = endpoint(status, body).await;
        let url = format!("http://{address}/token");
        let error = exchange(
            &fetcher(),
            &request(&url, ClientAuth::Secret("planted-secret"), None),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(error.message.contains(expected), "{error} lacks {expected}");
        assert_eq!(error.transient, transient, "{error}");
        assert!(!error.message.contains("planted"), "{error}");
    }
}

#[tokio::test]
async fn a_token_endpoint_off_the_allow_list_should_never_be_dialed() {
    let (address, sent) = endpoint(200, ISSUED).await;
    let url = format!("http://{address}/token");
    let guarded = Fetcher::new(EndpointGuard::new(&["auth.example"]).unwrap()).unwrap();
    let error = exchange(
        &guarded,
        &request(&url, ClientAuth::Secret("s"), None),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(
        error.message.contains("CAPSTAN_TOKEN_ENDPOINT_HOSTS"),
        "{error}"
    );
    assert!(!error.transient);
    assert!(sent.lock().unwrap().is_empty());
    // Down: transient.
    let error = exchange(
        &fetcher(),
        &request("http://127.0.0.1:9/token", ClientAuth::Secret("s"), None),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(
        error.transient && error.message.contains("could not be reached"),
        "{error}"
    );
}
