//! Composer benchmark (`make bench`): a warm document cache, 3 bindings × 2 MCP servers (two
//! demo providers on loopback), each binding with knowledge and a skill.
//!
//! Reports the median full compose (documents from the cache, six upstream sessions opened
//! and listed, knowledge fetched, instructions rendered, sessions closed), and `tools/call`
//! forwarded through the composer against the same rmcp client calling the upstream directly,
//! interleaved call by call so both see the same machine, and the cost of the definition
//! digests every compose takes of each allowed tool (pins, `pins.rs`) against the compose
//! they are part of. Nothing here is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_compose::composer::Composer;
use capstan_compose::limits::Limits;
use capstan_compose::source::CachedSource;
use capstan_compose::source::FixtureSource;
use capstan_testkit::DemoProvider;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

const COMPOSES: usize = 21;
const CALLS: usize = 501;
const DIGEST_ROUNDS: usize = 1001;

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let a = DemoProvider::start(&[]);
    let b = DemoProvider::start(&[]);
    let hosts = [a.host(), b.host()];
    let bindings: Vec<_> = (0..3)
        .map(|i| {
            json!({
                "metadata": { "name": format!("binding-{i}") },
                "spec": {
                    "serviceRef": { "name": format!("svc-{i}") },
                    "serviceName": format!("svc-{i}.example"),
                    "serviceAgentRef": { "name": "agent" },
                    "configurationVersion": "v1",
                    "knowledge": { "sources": [{ "type": "LLMDocs", "url": a.url("/llms-full.txt") }] },
                    "tools": { "mcpServers": [
                        { "name": format!("a{i}"), "endpoint": a.url("/mcp"),
                          "toolSelector": { "include": ["streams_list", "streams_get", "pipeline_diagnose"] } },
                        { "name": format!("b{i}"), "endpoint": b.url("/mcp"),
                          "toolSelector": { "include": ["streams_list", "streams_get"] } },
                    ]},
                    "skills": [{ "name": format!("skill-{i}"), "description": "a runbook", "source": b.url("/runbooks/lag.md") }]
                }
            })
        })
        .collect();
    let fixture = std::env::temp_dir().join(format!("capstan-bench-{}.json", std::process::id()));
    std::fs::write(&fixture, serde_json::to_string(&bindings).unwrap()).unwrap();
    let source = CachedSource::new(
        Arc::new(FixtureSource::new(&fixture)),
        Duration::from_secs(3600),
        4,
    );
    source.documents("bench").await; // warm
    capstan_core::install_crypto_provider();
    let composer =
        Composer::from_allow_lists(&hosts.join(","), &hosts.join(","), Limits::default())
            .expect("the demo providers' hosts are an allow-list");

    // Warm-up compose (first connections, first knowledge fetch).
    let (documents, _) = source.documents("bench").await;
    composer.compose(&documents.documents).await.close().await;
    let mut composes = Vec::new();
    let mut tools = 0;
    for _ in 0..COMPOSES {
        let started = Instant::now();
        let (documents, _) = source.documents("bench").await;
        let composed = composer.compose(&documents.documents).await;
        tools = composed.composition.tools.len();
        composed.close().await;
        composes.push(started.elapsed());
    }
    std::fs::remove_file(&fixture).ok();

    let (documents, _) = source.documents("bench").await;
    let composed = composer.compose(&documents.documents).await;
    let direct = ClientConfig::default()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(a.url("/mcp")),
        ))
        .await
        .unwrap();
    let arguments = json!({ "name": "orders" }).as_object().cloned();
    let mut through = Vec::new();
    let mut straight = Vec::new();
    for i in 0..CALLS + 10 {
        let started = Instant::now();
        composed
            .call_tool("a0__streams_get", arguments.clone())
            .await
            .unwrap();
        let t = started.elapsed();
        let started = Instant::now();
        let mut params = CallToolRequestParams::new("streams_get");
        params.arguments = arguments.clone();
        direct.call_tool(params).await.unwrap();
        let d = started.elapsed();
        if i >= 10 {
            through.push(t);
            straight.push(d);
        }
    }
    // The digests one compose takes: one per allowed tool the servers list.
    let listed = direct.list_all_tools().await.unwrap();
    let allowed = composed
        .composition
        .bindings
        .iter()
        .map(|b| b.definitions.len())
        .sum::<usize>();
    let mut digests = Vec::new();
    for _ in 0..DIGEST_ROUNDS {
        let started = Instant::now();
        for tool in &listed {
            std::hint::black_box(capstan_compose::pins::definition_digest(tool));
        }
        digests.push(started.elapsed() / u32::try_from(listed.len()).unwrap_or(1));
    }
    let per_digest = median(digests);
    let _ = direct.cancel().await;
    composed.close().await;

    let compose = median(composes);
    let through = median(through);
    let straight = median(straight);
    println!(
        "<!-- bench:compose -->\n### Composition (`crates/capstan-compose/benches/compose.rs`)\n\n```text"
    );
    println!("capstan-compose: 3 bindings x 2 MCP servers on loopback, warm document cache");
    println!(
        "full compose ({tools} tools, 6 sessions, 3 knowledge fetches), median of {COMPOSES}: {compose:.2?}"
    );
    println!(
        "definition digest (pins), median of {DIGEST_ROUNDS} rounds over the {} tools the demo provider lists: {per_digest:.2?} per tool; {allowed} per compose = {:.2?}, {:.2}% of the compose",
        listed.len(),
        per_digest * u32::try_from(allowed).unwrap_or(0),
        100.0 * per_digest.as_secs_f64() * allowed as f64 / compose.as_secs_f64()
    );
    println!(
        "tools/call, median of {CALLS} interleaved: through the composer {through:.2?}, direct {straight:.2?}, ratio {:.2}x",
        through.as_secs_f64() / straight.as_secs_f64()
    );
    println!("```\n<!-- /bench:compose -->");
}
