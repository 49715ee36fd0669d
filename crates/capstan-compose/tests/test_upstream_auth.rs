//! A binding's `auth` blocks at composition: each endpoint is asked for the credential its
//! block names and sends it; one whose credential cannot be had is never dialed, and its
//! binding says so (docs/upstream-auth.md).

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::any;
use capstan_compose::composer::Composer;
use capstan_compose::composition::UpstreamStage;
use capstan_compose::limits::Limits;
use capstan_upstream::credential::{
    Credentials, Dialed, Fixed, Header, NoCredentials, SharedCredential, SharedCredentials,
};
use common::{composer, documents};
use serde_json::json;
use tokio::net::TcpListener;

/// Every request a server got: its path and its `X-Api-Key`.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A server that records each request and answers every path with a short Markdown document
/// (an MCP client reading it gets no JSON-RPC answer, which is enough here).
async fn recording_server() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let app = Router::new().fallback(any(
        move |uri: axum::http::Uri, headers: HeaderMap| async move {
            let key = headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            record.lock().unwrap().push((uri.path().to_owned(), key));
            "# Recorded document\n"
        },
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, seen)
}

/// A binding whose MCP server and knowledge source on `address` each carry a Secret in
/// `X-Api-Key`.
fn authenticated_binding(address: SocketAddr) -> String {
    let auth =
        json!({"secret": {"name": "streamco-api-key", "key": "token", "header": "X-Api-Key"}});
    serde_json::to_string(&json!([{
        "metadata": {"name": "streamco"},
        "spec": {
            "serviceRef": {"name": "streamco"},
            "serviceName": "streamco.example",
            "serviceAgentRef": {"name": "streamco-agent"},
            "configurationVersion": "v1",
            "knowledge": {"sources": [
                {"type": "Markdown", "url": format!("http://{address}/doc.md"), "auth": auth}
            ]},
            "tools": {"mcpServers": [{
                "name": "streamco",
                "endpoint": format!("http://{address}/mcp"),
                "toolSelector": {"include": ["streams_list"]},
                "auth": auth,
            }]}
        }
    }]))
    .unwrap()
}

/// Credentials that give every endpoint one fixed `X-Api-Key`, recording what was asked.
#[derive(Debug, Default)]
struct Planted(Mutex<Vec<String>>);

impl Credentials for Planted {
    fn credential(&self, dialed: &Dialed<'_>) -> SharedCredential {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} of {}", dialed.what, dialed.binding));
        Arc::new(Fixed(Header::new("X-Api-Key", "", "planted-key").unwrap()))
    }
}

fn hosts() -> Vec<String> {
    vec!["127.0.0.1".to_owned()]
}

#[tokio::test(flavor = "multi_thread")]
async fn every_endpoint_should_send_the_credential_its_block_names() {
    let (address, seen) = recording_server().await;
    let planted = Arc::new(Planted::default());
    let credentials: SharedCredentials = planted.clone();
    let composed = composer(&hosts(), &hosts(), Limits::default())
        .compose_reusing(
            &documents(&authenticated_binding(address)),
            None,
            Default::default(),
            &credentials,
        )
        .await;
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().any(|(path, _)| path == "/mcp"), "{seen:?}");
    assert!(seen.iter().any(|(path, _)| path == "/doc.md"), "{seen:?}");
    for (path, key) in &seen {
        assert_eq!(
            key.as_deref(),
            Some("planted-key"),
            "{path} went without it"
        );
    }
    let mut asked = planted.0.lock().unwrap().clone();
    asked.sort();
    assert_eq!(
        asked,
        [
            "MCP server streamco of streamco".to_owned(),
            format!("knowledge source http://{address}/doc.md of streamco"),
        ]
    );
    assert!(
        composed
            .composition
            .instructions
            .contains("# Recorded document")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_whose_credential_cannot_be_had_should_never_be_dialed() {
    let (address, seen) = recording_server().await;
    let composer: Composer =
        composer(&hosts(), &hosts(), Limits::default()).with_credentials(Arc::new(NoCredentials));
    let composed = composer
        .compose(&documents(&authenticated_binding(address)))
        .await;
    assert_eq!(
        seen.lock().unwrap().len(),
        0,
        "a request left without its credential"
    );
    let outcome = &composed.composition.bindings[0];
    assert_eq!(outcome.upstream_failures.len(), 1, "{outcome:?}");
    assert_eq!(
        outcome.upstream_failures[0].stage,
        UpstreamStage::Credential
    );
    let reasons = outcome.stable_reasons().join("; ");
    assert!(
        reasons.contains("MCP server streamco")
            && reasons.contains("credential could not be had")
            && reasons.contains("asks for secret"),
        "{reasons}"
    );
    assert_eq!(outcome.knowledge_errors.len(), 1, "{outcome:?}");
    assert!(
        outcome.knowledge_errors[0].contains("no credential"),
        "{outcome:?}"
    );
}
