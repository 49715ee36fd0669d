//! Sidecar soak (`make soak`, docs/reliability.md): 200 concurrent sessions making mixed tool
//! calls for SOAK_SECONDS (600) or SOAK_MAX_CALLS (5,000,000), whichever comes first, on
//! loopback: provider tools, a routed capability, and injected bad calls (arguments the schema
//! refuses, a tool that does not exist) whose errors are expected. Each session ends and a new
//! one starts every 500 calls, so session setup and teardown are soaked too. The sidecar's RSS
//! is sampled every 30 s. Reports RSS over time, calls and errors by kind; nothing is asserted
//! (a soak reports), but unexpected errors are listed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use capstan_testkit::sidecar::*;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use tokio::sync::Mutex;

const SESSIONS: usize = 200;
const CALLS_PER_SESSION: u64 = 500;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_mib(pid: u32) -> f64 {
    rss_kib(pid) / 1024.0
}

/// The n-th call of a session: (tool, arguments, whether an error is expected).
fn nth_call(n: u64) -> (&'static str, Value, bool) {
    match n % 10 {
        0..=3 => ("one__streams_list", json!({}), false),
        4..=5 => ("two__streams_get", json!({"name": "orders"}), false),
        6..=7 => (
            "cap__web_search",
            json!({"query": "lag", "intent": "soak"}),
            false,
        ),
        8 => ("two__streams_get", json!({"name": 42}), true),
        _ => ("three__does_not_exist", json!({}), true),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(soak());
}

async fn soak() {
    capstan_testkit::install_crypto_provider();
    let seconds = env_u64("SOAK_SECONDS", 600);
    let max_calls = env_u64("SOAK_MAX_CALLS", 5_000_000);
    let providers = [
        DemoProvider::start(&[]),
        DemoProvider::start(&[]),
        DemoProvider::start(&[]),
    ];
    let hosts: Vec<String> = providers.iter().map(DemoProvider::host).collect();
    let mut documents = json!([
        binding(
            "one",
            None,
            "one",
            &providers[0],
            &["streams_list", "docs_search"]
        ),
        binding(
            "two",
            None,
            "two",
            &providers[1],
            &["streams_get", "docs_search"]
        ),
        binding("three", None, "three", &providers[2], &["streams_list"]),
    ]);
    for (index, cost) in [(0, 1000), (1, 3000)] {
        documents[index]["spec"]["tools"]["mcpServers"][0]["capabilities"] = json!([{
            "capabilityId": "cap.web.search", "tool": "docs_search",
            "costHint": {"baseMicrosUsd": cost}, "quality": 7000
        }]);
    }
    let sidecar = Sidecar::start(
        &documents,
        &hosts,
        &[
            // One caller (no token) holds every session and each session's GET stream:
            // room for all of them under every cap, with churn.
            ("CAPSTAN_MAX_SESSIONS", "1000"),
            ("CAPSTAN_MAX_SESSIONS_PER_CALLER", "1000"),
            ("CAPSTAN_MAX_SESSIONS_PER_PROJECT", "1000"),
            ("CAPSTAN_METERING_SINK", "off"),
        ],
    );
    let pid = sidecar.pid();
    let sidecar = Arc::new(sidecar);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let outcomes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let unexpected: Arc<Mutex<Vec<String>>> = Arc::default();

    let mut workers = Vec::new();
    for worker in 0..SESSIONS {
        let (sidecar, stop, calls, outcomes, unexpected) = (
            sidecar.clone(),
            stop.clone(),
            calls.clone(),
            outcomes.clone(),
            unexpected.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut n = worker as u64;
            while !stop.load(Ordering::Relaxed) {
                let session = sidecar.session("soak", None).await;
                for _ in 0..CALLS_PER_SESSION {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let (tool, arguments, expect_error) = nth_call(n);
                    n += 1;
                    let mut params = CallToolRequestParams::new(tool);
                    params.arguments = arguments.as_object().cloned();
                    let outcome = match session.call_tool(params).await {
                        Ok(result) if result.is_error == Some(true) => format!(
                            "{}:{}",
                            tool,
                            result
                                .structured_content
                                .as_ref()
                                .map_or("tool_error".into(), |c| {
                                    c["error"]["kind"]
                                        .as_str()
                                        .unwrap_or("tool_error")
                                        .to_owned()
                                })
                        ),
                        Ok(_) => format!("{tool}:ok"),
                        Err(error) => format!(
                            "{tool}:protocol_error ({})",
                            error.to_string().chars().take(60).collect::<String>()
                        ),
                    };
                    let ok = outcome.ends_with(":ok");
                    if ok == expect_error {
                        let mut list = unexpected.lock().await;
                        if list.len() < 20 {
                            list.push(outcome.clone());
                        }
                    }
                    *outcomes.lock().await.entry(outcome).or_default() += 1;
                    calls.fetch_add(1, Ordering::Relaxed);
                }
                let _ = session.cancel().await;
            }
        }));
    }

    println!(
        "\ncapstan-sidecar soak: {SESSIONS} concurrent sessions, mixed calls, a new session every {CALLS_PER_SESSION} calls, up to {seconds} s or {max_calls} calls"
    );
    println!("{:>7} {:>10} {:>10}", "second", "calls", "RSS MiB");
    let mut samples = Vec::new();
    loop {
        let now = Instant::now();
        let done = calls.load(Ordering::Relaxed);
        if now >= deadline || done >= max_calls {
            break;
        }
        let rss = rss_mib(pid);
        let second = started.elapsed().as_secs();
        println!("{second:>7} {done:>10} {rss:>10.1}");
        samples.push((second, rss));
        tokio::time::sleep(Duration::from_secs(30).min(deadline - now)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = calls.load(Ordering::Relaxed);
    let final_rss = rss_mib(pid);
    samples.push((started.elapsed().as_secs(), final_rss));
    println!(
        "{:>7} {total:>10} {final_rss:>10.1}  (end)",
        started.elapsed().as_secs()
    );
    // Warm-up: the first half of the run. Heap in use climbs for the first ~4 minutes while
    // per-connection buffers and pools reach their steady sizes (heaptrack, docs/reliability.md),
    // so flatness is judged on the second half: its first sample against its maximum and end.
    let half = started.elapsed().as_secs() / 2;
    let second_half: Vec<f64> = samples
        .iter()
        .filter(|(s, _)| *s >= half)
        .map(|(_, r)| *r)
        .collect();
    if let (Some(first), Some(max)) = (
        second_half.first(),
        second_half.iter().cloned().reduce(f64::max),
    ) {
        println!(
            "RSS over the second half: {first:.1} MiB at {half} s, max {max:.1} MiB, end {final_rss:.1} MiB ({:+.1}% end vs {half} s)",
            (final_rss - first) / first * 100.0
        );
    }
    println!(
        "{total} calls in {elapsed:.0} s ({:.0} calls/s); outcomes:",
        total as f64 / elapsed
    );
    for (outcome, count) in outcomes.lock().await.iter() {
        println!("  {count:>9}  {outcome}");
    }
    let unexpected = unexpected.lock().await;
    println!(
        "unexpected outcomes: {}",
        if unexpected.is_empty() {
            "none".to_owned()
        } else {
            unexpected.join(", ")
        }
    );
}
