//! Sidecar benchmark (`make bench`): `tools/call` through the sidecar against the same rmcp
//! client calling the demo provider directly — one session, and 32 concurrent sessions —
//! alternated round by round; then the cold setup of a session with 3 upstreams, and the
//! sidecar's RSS per open session over 1,000 sessions. Release builds; nothing is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

const ROUNDS: usize = 5;
const CALLS: usize = 400;
const SESSIONS: usize = 32;
const CALLS_PER_SESSION: usize = 50;
const SETUPS: usize = 21;
const OPEN_SESSIONS: usize = 1000;

type Client = RunningService<RoleClient, ClientConfig>;

async fn direct(provider: &DemoProvider) -> Client {
    ClientConfig::default()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(provider.url("/mcp")),
        ))
        .await
        .unwrap()
}

fn params(name: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = json!({"name": "orders"}).as_object().cloned();
    params
}

/// Per-call latencies and the wall time of `clients` calling `tool` concurrently.
async fn run(clients: &[Client], tool: &str, calls_each: usize) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let per_client = futures::future::join_all(clients.iter().map(|client| async move {
        let mut latencies = Vec::with_capacity(calls_each);
        for _ in 0..calls_each {
            let t = Instant::now();
            let result = client.call_tool(params(tool)).await.unwrap();
            assert_ne!(result.is_error, Some(true));
            latencies.push(t.elapsed());
        }
        latencies
    }))
    .await;
    (per_client.concat(), started.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// A workload's label, its calls, direct and through-the-sidecar stats per round, and the
/// median metered duration of the forwarded call.
type Row = (&'static str, usize, Vec<Stats>, Vec<Stats>, f64);

struct Stats {
    p50: Duration,
    p99: Duration,
    throughput: f64,
}

fn stats(mut latencies: Vec<Duration>, wall: Duration) -> Stats {
    latencies.sort();
    Stats {
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        throughput: latencies.len() as f64 / wall.as_secs_f64(),
    }
}

fn median_f(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
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
    capstan_demo_provider::harness::install_crypto_provider();
    let providers = [
        DemoProvider::start(&[]),
        DemoProvider::start(&[]),
        DemoProvider::start(&[]),
    ];
    let hosts: Vec<String> = providers.iter().map(DemoProvider::host).collect();
    let documents = json!([
        binding(
            "one",
            None,
            "one",
            &providers[0],
            &["streams_get", "streams_list"]
        ),
        binding(
            "two",
            None,
            "two",
            &providers[1],
            &["streams_get", "streams_list"]
        ),
        binding(
            "three",
            None,
            "three",
            &providers[2],
            &["streams_get", "streams_list"]
        ),
    ]);
    // Binding one also serves cap.web.search (docs_search), and binding two competes for it:
    // the routed call pays for argument handling, the merge and selection, then forwards.
    let mut documents = documents;
    for (index, (cost, quality)) in [(1000, 9000), (4000, 6000)].into_iter().enumerate() {
        let server = &mut documents[index]["spec"]["tools"]["mcpServers"][0];
        if let Some(include) = server["toolSelector"]["include"].as_array_mut() {
            include.push(json!("docs_search"));
        }
        server["capabilities"] = json!([{
            "capabilityId": "cap.web.search", "tool": "docs_search",
            "costHint": {"baseMicrosUsd": cost}, "quality": quality
        }]);
    }
    // Metering on, to a file, as in production (one JSON line per provider call); its
    // durations also split the sidecar's time into the forwarded call and the rest.
    let sidecar = Sidecar::start(&documents, &hosts, &[]);
    // CAPSTAN_BENCH_PERF=<file>: record a CPU profile of the sidecar during the call rounds
    // (`perf report -i <file>` shows where its time goes).
    let perf = std::env::var("CAPSTAN_BENCH_PERF").ok().map(|out| {
        std::process::Command::new("perf")
            .args([
                "record",
                "-F",
                "999",
                "-g",
                "-o",
                &out,
                "-p",
                &sidecar.pid().to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    });

    // One session, then 32: alternate direct and through-the-sidecar, round by round.
    let mut rows: Vec<Row> = Vec::new();
    for (label, sessions, calls) in [
        ("1 session", 1, CALLS),
        ("32 sessions", SESSIONS, CALLS_PER_SESSION),
    ] {
        let mut direct_clients = Vec::new();
        let mut sidecar_clients = Vec::new();
        for _ in 0..sessions {
            direct_clients.push(direct(&providers[0]).await);
            sidecar_clients.push(sidecar.session("bench", None).await);
        }
        // Warm-up.
        run(&direct_clients, "streams_get", 5).await;
        run(&sidecar_clients, "one__streams_get", 5).await;
        let metered_before = sidecar.meter_events().len();
        let mut through = Vec::new();
        let mut straight = Vec::new();
        for _ in 0..ROUNDS {
            let (l, w) = run(&direct_clients, "streams_get", calls).await;
            straight.push(stats(l, w));
            let (l, w) = run(&sidecar_clients, "one__streams_get", calls).await;
            through.push(stats(l, w));
        }
        for client in direct_clients.into_iter().chain(sidecar_clients) {
            let _ = client.cancel().await;
        }
        let forwarded = median_f(
            sidecar.meter_events()[metered_before..]
                .iter()
                .filter_map(|event| event["durationMs"].as_f64())
                .collect(),
        );
        rows.push((label, sessions * calls, straight, through, forwarded));
    }

    // Routed vs namespaced: the same provider tool, called as cap__web_search and as
    // one__docs_search, alternated call by call in one session.
    let routed_session = sidecar.session("bench", None).await;
    let search = |name: &str| {
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = json!({"query": "consumer lag"}).as_object().cloned();
        params
    };
    for _ in 0..20 {
        routed_session
            .call_tool(search("cap__web_search"))
            .await
            .unwrap();
        routed_session
            .call_tool(search("one__docs_search"))
            .await
            .unwrap();
    }
    let (mut routed, mut named) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS * CALLS {
        for (tool, into) in [
            ("cap__web_search", &mut routed),
            ("one__docs_search", &mut named),
        ] {
            let started = Instant::now();
            let result = routed_session.call_tool(search(tool)).await.unwrap();
            assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
            into.push(started.elapsed());
        }
    }
    let _ = routed_session.cancel().await;
    routed.sort();
    named.sort();
    let (routed_p50, named_p50) = (percentile(&routed, 0.5), percentile(&named, 0.5));

    if let Some(mut perf) = perf {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &perf.id().to_string()])
            .status();
        let _ = perf.wait();
    }

    // Cold session setup with 3 upstreams: initialize (compose, connect, list) to ready.
    let mut setups = Vec::new();
    for _ in 0..SETUPS {
        let started = Instant::now();
        let session = sidecar.session("bench", None).await;
        setups.push(started.elapsed().as_secs_f64() * 1000.0);
        let _ = session.cancel().await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // RSS per open session.
    let pid = sidecar.pid();
    let before = rss_kib(pid);
    let mut open = Vec::with_capacity(OPEN_SESSIONS);
    for _ in 0..OPEN_SESSIONS {
        open.push(sidecar.session("bench", None).await);
    }
    let after = rss_kib(pid);
    for session in open {
        let _ = session.cancel().await;
    }

    println!(
        "\ncapstan-sidecar: tools/call through the sidecar (Unix socket) vs direct to the demo provider (TCP loopback), same rmcp client, medians of {ROUNDS} alternated rounds, metering on"
    );
    println!(
        "{:<12} {:>7} | {:>10} {:>10} {:>11} | {:>10} {:>10} {:>11} | {:>9} {:>9}",
        "workload",
        "calls",
        "direct p50",
        "p99",
        "calls/s",
        "sidecar p50",
        "p99",
        "calls/s",
        "p50 ratio",
        "tput ratio"
    );
    for (label, calls, straight, through, _) in &rows {
        let med = |v: &[Stats], f: &dyn Fn(&Stats) -> f64| median_f(v.iter().map(f).collect());
        let d50 = med(straight, &|s| s.p50.as_secs_f64() * 1000.0);
        let d99 = med(straight, &|s| s.p99.as_secs_f64() * 1000.0);
        let dt = med(straight, &|s| s.throughput);
        let s50 = med(through, &|s| s.p50.as_secs_f64() * 1000.0);
        let s99 = med(through, &|s| s.p99.as_secs_f64() * 1000.0);
        let st = med(through, &|s| s.throughput);
        println!(
            "{label:<12} {calls:>7} | {d50:>8.2}ms {d99:>8.2}ms {dt:>11.0} | {s50:>9.2}ms {s99:>8.2}ms {st:>11.0} | {:>8.2}x {:>8.2}x",
            s50 / d50,
            st / dt
        );
    }
    for (label, _, _, _, forwarded) in &rows {
        println!(
            "{label}: of the sidecar's time per call, the forwarded call to the provider (metered: schema check, upstream round trip) took a median {forwarded:.2} ms"
        );
    }
    println!(
        "routed: cap__web_search (2 candidates, selection, forward) p50 {:.3} ms vs one__docs_search (the same provider tool by name) p50 {:.3} ms, {} calls each alternated: {:.3}x",
        routed_p50.as_secs_f64() * 1000.0,
        named_p50.as_secs_f64() * 1000.0,
        routed.len(),
        routed_p50.as_secs_f64() / named_p50.as_secs_f64()
    );
    println!(
        "cold session setup (initialize: compose 3 bindings, connect and list 3 upstreams), median of {SETUPS}: {:.1} ms",
        median_f(setups)
    );
    println!(
        "sidecar RSS with {OPEN_SESSIONS} open sessions: {:.1} MiB -> {:.1} MiB, {:.1} KiB per session (3 upstream sessions each)",
        before / 1024.0,
        after / 1024.0,
        (after - before) / OPEN_SESSIONS as f64
    );
}
