//! Real servers on loopback for the composer's integration tests: the demo provider (built from
//! this workspace) and an independent MCP server written with the Python `mcp` SDK.

#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use capstan_compose::composer::Composer;
use capstan_compose::limits::Limits;
use capstan_compose::source::Document;
use capstan_upstream::fetch::Fetcher;
use capstan_upstream::guard::EndpointGuard;
use serde_json::{Value, json};

pub use capstan_testkit::{DemoProvider, PythonServer, python, repo_root};

/// The StreamCo fixture with its endpoints moved to `address`.
pub fn streamco_documents(address: SocketAddr) -> Vec<Document> {
    let text =
        std::fs::read_to_string(repo_root().join("examples/streamco/capability-documents.json"))
            .unwrap()
            .replace("127.0.0.1:7810", &address.to_string());
    documents(&text)
}

/// Parses documents the way the sources do.
pub fn documents(text: &str) -> Vec<Document> {
    let parsed = capstan_api::parse(text).unwrap();
    assert!(parsed.invalid.is_empty(), "{:?}", parsed.invalid);
    parsed
        .objects
        .into_iter()
        .map(|p| {
            let document = p.object.into_document().unwrap();
            Document {
                binding: document.metadata.name.clone().unwrap(),
                spec: document.spec,
            }
        })
        .collect()
}

pub use capstan_testkit::binding_document as binding;

pub fn composer(mcp_hosts: &[String], fetch_hosts: &[String], limits: Limits) -> Composer {
    capstan_core::install_crypto_provider();
    Composer::new(
        EndpointGuard::new(mcp_hosts).unwrap(),
        Fetcher::new(EndpointGuard::new(fetch_hosts).unwrap()).unwrap(),
        limits,
    )
}

/// A document with knowledge sources only.
pub fn knowledge_binding(urls: &[String]) -> String {
    let sources: Vec<Value> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| json!({"type": "Markdown", "title": format!("Doc {i}"), "url": url}))
        .collect();
    serde_json::to_string(&json!([{
        "metadata": { "name": "docs" },
        "spec": {
            "serviceRef": { "name": "docs" },
            "serviceName": "docs.example",
            "serviceAgentRef": { "name": "docs-agent" },
            "configurationVersion": "v7",
            "knowledge": { "sources": sources }
        }
    }]))
    .unwrap()
}

/// Composes one binding `name` whose MCP server `server` at `endpoint` allows `include`, with
/// `hosts` on both allow-lists.
pub async fn compose_binding(
    hosts: &[String],
    name: &str,
    server: &str,
    endpoint: &str,
    include: &[&str],
) -> capstan_compose::composer::Composed {
    let text = serde_json::to_string(&json!([binding(name, server, endpoint, include)])).unwrap();
    composer(hosts, hosts, Limits::default())
        .compose(&documents(&text))
        .await
}
