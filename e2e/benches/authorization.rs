//! Per-tool authorization's cost (`make bench`, docs/authorization.md): a composition of 301
//! tools (43 bindings of 7 tools each on one demo provider) served by two sidecars side by side
//! on a real apiserver, one with `CAPSTAN_TOOL_AUTHORIZATION=rbac` and one without, to callers
//! holding ServiceAccount tokens:
//! - frank, granted everything (the chart's tools-user role: one review answers);
//! - pat, granted one tool by name (every wider question is denied, so every name is asked).
//!
//! Three measures, each alternated round by round, medians:
//! 1. the first `tools/list` of a new session (a fresh token each round, so no answer is
//!    cached): milliseconds, and the reviews the sidecar made (its own counter);
//! 2. the reviews a caller costs in steady state, calling continuously across several TTLs of
//!    a sidecar whose TTL is short, scaled to the default 60 s;
//! 3. the sidecar's CPU per forwarded call within the TTL (the decision cached), with
//!    authorization and without, the same client and calls on both sides.
//!
//! Nothing here is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use capstan_e2e::ControlPlane;
use capstan_e2e::bench::{alternating_cpu, kubectl, median};
use capstan_e2e::controller::{NAMESPACE, bind_cluster_role, service_account};
use capstan_e2e::sidecar::{PROJECT_HEADER, SidecarProcess};
use capstan_e2e::suite::with_plane;
use capstan_e2e::{free_address, metric};
use capstan_testkit::{DemoProvider, binding_document};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use serde_json::{Value, json};

/// The demo provider's tools a binding selects (its `streams_by_project` takes a project
/// argument and is never composed).
const TOOLS: [&str; 7] = [
    "streams_list",
    "streams_get",
    "pipeline_diagnose",
    "streams_consumer_lag_breakdown",
    "docs_search",
    "streams_export",
    "streams_restart",
];
const BINDINGS: usize = 43;
const ROUNDS: usize = 5;
/// The CPU measure: rounds, turns per round, calls per turn.
const CPU_ROUNDS: usize = 5;
const CHUNKS: usize = 20;
const CHUNK: usize = 200;
/// The short TTL of the steady-state sidecar, and how long a caller calls it.
const SHORT_TTL: u64 = 5;
const STEADY: Duration = Duration::from_secs(21);

const RBAC: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: binding-lister}
  rules:
  - {apiGroups: [capabilities.assistant.miloapis.com], resources: [capabilitybindings], verbs: [list]}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: one-tool}
  rules:
  - apiGroups: [capabilities.assistant.miloapis.com]
    resources: [tools]
    resourceNames: [b00__streams_list]
    verbs: [use]
"#;

fn main() {
    let report = with_plane("bench-authorization", |plane, runtime| {
        runtime.block_on(bench(plane))
    });
    println!(
        "<!-- bench:authorization -->\n### Per-tool authorization (`e2e/benches/authorization.rs`)\n\n```text"
    );
    println!("{}", report.trim());
    println!("```\n<!-- /bench:authorization -->");
}

/// A sidecar of the bench and where its metrics are.
struct Sidecar {
    process: SidecarProcess,
    metrics: String,
}

impl Sidecar {
    fn start(
        plane: &ControlPlane,
        composer: &std::path::Path,
        name: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let metrics = free_address().unwrap();
        let mut env = env.to_vec();
        env.extend([
            ("CAPABILITY_MCP_ENDPOINT_HOSTS", "127.0.0.1"),
            ("CAPSTAN_BASE_TOOLS", "off"),
            ("CAPSTAN_METRICS_ADDRESS", metrics.as_str()),
        ]);
        let process = SidecarProcess::start(plane, composer, name, &env).unwrap();
        let started = Instant::now();
        while metric(&metrics, "capstan_sidecar_crd_synced ") != 1.0 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{name} did not sync"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { process, metrics }
    }

    /// Reviews made so far, whatever their answer.
    fn reviews(&self) -> f64 {
        ["allowed", "denied", "error"]
            .iter()
            .map(|outcome| {
                metric(
                    &self.metrics,
                    &format!("capstan_sidecar_access_reviews_total{{outcome=\"{outcome}\"}} "),
                )
            })
            .sum()
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// A session of the caller holding `token` (initialized: the project is composed).
    async fn session(&self, token: &str) -> RunningService<RoleClient, ClientConfig> {
        let url = "http://localhost/mcp";
        let config = StreamableHttpClientTransportConfig::with_uri(url)
            .custom_headers(HashMap::from([(
                http::HeaderName::from_bytes(PROJECT_HEADER.to_ascii_lowercase().as_bytes())
                    .unwrap(),
                http::HeaderValue::from_static("acme"),
            )]))
            .auth_header(token.to_owned());
        ClientConfig::default()
            .serve(StreamableHttpClientTransport::with_client(
                UnixSocketHttpClient::new(self.process.socket.to_str().unwrap(), url),
                config,
            ))
            .await
            .expect("initializing a session")
    }
}

/// A fresh token of ServiceAccount `account`: a caller no answer is cached for.
fn token(plane: &ControlPlane, account: &str) -> String {
    kubectl(
        plane,
        &[
            "create",
            "token",
            account,
            "-n",
            NAMESPACE,
            "--duration",
            "2h",
        ],
        None,
    )
    .trim()
    .to_owned()
}

async fn bench(plane: &ControlPlane) -> String {
    let admin = plane.client().await.unwrap();
    plane.install_crds(&admin).await.unwrap();
    kubectl(plane, &["apply", "-f", "config/rbac/sidecar.yaml"], None);
    kubectl(plane, &["apply", "-f", "config/rbac/tools-user.yaml"], None);
    kubectl(plane, &["apply", "-f", "-"], Some(RBAC));
    let composer = service_account(plane, "composer").unwrap();
    bind_cluster_role(plane, "composer", "capstan-sidecar").unwrap();
    for (account, roles) in [
        ("frank", ["binding-lister", "capstan-tools-user"]),
        ("pat", ["binding-lister", "one-tool"]),
    ] {
        service_account(plane, account).unwrap();
        for role in roles {
            bind_cluster_role(plane, account, role).unwrap();
        }
    }
    let provider = DemoProvider::start(&[]);
    let items: Vec<Value> = (0..BINDINGS)
        .map(|i| {
            let mut binding = binding_document(
                &format!("b{i:02}"),
                &format!("b{i:02}"),
                &provider.url("/mcp"),
                &TOOLS,
            );
            binding["apiVersion"] = json!("capabilities.assistant.miloapis.com/v1alpha1");
            binding["kind"] = json!("CapabilityBinding");
            binding
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    kubectl(plane, &["apply", "-f", "-"], Some(&list));
    let off = Sidecar::start(plane, &composer, "off", &[]);
    let rbac = Sidecar::start(
        plane,
        &composer,
        "rbac",
        &[("CAPSTAN_TOOL_AUTHORIZATION", "rbac")],
    );
    let short_ttl = SHORT_TTL.to_string();
    let steady = Sidecar::start(
        plane,
        &composer,
        "rbac-short-ttl",
        &[
            ("CAPSTAN_TOOL_AUTHORIZATION", "rbac"),
            ("CAPSTAN_CALLER_CHECK_TTL_SECONDS", short_ttl.as_str()),
        ],
    );
    let mut report = String::new();
    report += &first_lists(plane, &off, &rbac).await;
    report += &steady_state(plane, &steady).await;
    let control = Sidecar::start(plane, &composer, "off-control", &[]);
    report += &call_cpu(
        plane,
        [
            ("authorization off", &off),
            ("authorization rbac", &rbac),
            ("authorization off, a second sidecar", &control),
        ],
    )
    .await;
    report
}

/// The first `tools/list` of a new session, per caller and sidecar: milliseconds and
/// reviews, medians of alternated rounds (a fresh token each, so nothing is cached).
async fn first_lists(plane: &ControlPlane, off: &Sidecar, rbac: &Sidecar) -> String {
    let cases: [(&str, &Sidecar, &str); 3] = [
        ("off, frank", off, "frank"),
        ("rbac, frank (everything: one review)", rbac, "frank"),
        ("rbac, pat (one tool by name)", rbac, "pat"),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut reviews: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut listed = vec![0; cases.len()];
    for _ in 0..ROUNDS {
        for (i, (_, sidecar, account)) in cases.iter().enumerate() {
            let session = sidecar.session(&token(plane, account)).await;
            let before = sidecar.reviews();
            let started = Instant::now();
            let tools = session.list_all_tools().await.unwrap();
            times[i].push(started.elapsed().as_secs_f64() * 1000.0);
            reviews[i].push(sidecar.reviews() - before);
            listed[i] = tools.len();
            let _ = session.cancel().await;
        }
    }
    let mut out = format!(
        "\nThe first tools/list of a new session: {} tools composed ({BINDINGS} bindings), \
         medians of {ROUNDS} alternated rounds, a fresh token each\n{:<40} {:>8} {:>10} {:>9}\n",
        BINDINGS * TOOLS.len(),
        "sidecar, caller",
        "listed",
        "p50 ms",
        "reviews"
    );
    for (i, (label, _, _)) in cases.iter().enumerate() {
        out += &format!(
            "{:<40} {:>8} {:>10.1} {:>9}\n",
            label,
            listed[i],
            median(times[i].clone()),
            median(reviews[i].clone())
        );
    }
    out
}

/// The reviews one caller costs while it calls continuously across several TTLs of the
/// short-TTL sidecar, and the same scaled to the default TTL of 60 s.
async fn steady_state(plane: &ControlPlane, steady: &Sidecar) -> String {
    // A decision is made at the first call and again at the first call after each TTL.
    let decisions = STEADY.as_secs().div_ceil(SHORT_TTL);
    let mut out = format!(
        "\nSteady state: one caller calling without pause for {} s on a sidecar whose TTL is \
         {SHORT_TTL} s ({decisions} decisions); at the default TTL of 60 s a caller costs one \
         decision a minute\n{:<12} {:>9} {:>22} {:>26}\n",
        STEADY.as_secs(),
        "caller",
        "reviews",
        "reviews per decision",
        "reviews per minute at 60 s"
    );
    for (account, tool) in [("frank", "b00__streams_list"), ("pat", "b00__streams_list")] {
        let session = steady.session(&token(plane, account)).await;
        let before = steady.reviews();
        let started = Instant::now();
        let mut calls = 0u64;
        while started.elapsed() < STEADY {
            call(&session, tool).await;
            calls += 1;
        }
        let made = steady.reviews() - before;
        let per_decision = made / decisions as f64;
        out += &format!(
            "{:<12} {:>9} {:>22.0} {:>26.0}   ({calls} calls)\n",
            account, made, per_decision, per_decision
        );
        let _ = session.cancel().await;
    }
    out
}

async fn call(session: &RunningService<RoleClient, ClientConfig>, tool: &str) {
    let result = session
        .call_tool(CallToolRequestParams::new(tool.to_owned()))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
}

/// The sidecar's CPU per forwarded call within the TTL, with authorization and without:
/// frank's session on each. The sides take turns every `CHUNK` calls (the order rotated), each
/// chunk's CPU read from the scheduler's nanosecond accounting, so a drift of the machine's load
/// falls on every side alike; a round is `CHUNKS` turns. A second sidecar without authorization
/// is the control: its ratio to the first is what two processes differ by with nothing between
/// them.
async fn call_cpu(plane: &ControlPlane, sides: [(&str, &Sidecar); 3]) -> String {
    let frank = token(plane, "frank");
    let mut sessions = Vec::new();
    for (_, sidecar) in &sides {
        let session = sidecar.session(&frank).await;
        session.list_all_tools().await.unwrap();
        for _ in 0..50 {
            call(&session, "b00__streams_list").await;
        }
        sessions.push(session);
    }
    // CAPSTAN_BENCH_PERF=<file>: a CPU profile of the sidecar with authorization over the
    // rounds (`perf report -i <file>`), to see what share of its CPU the check takes.
    let profile = std::env::var("CAPSTAN_BENCH_PERF").ok().map(|file| {
        std::process::Command::new("perf")
            .args([
                "record",
                "-e",
                "cpu-clock",
                "-F",
                "2000",
                "-g",
                "-o",
                &file,
                "-p",
            ])
            .arg(sides[1].1.pid().to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("perf record")
    });
    let cpu = alternating_cpu(
        sides.len(),
        |i| sides[i].1.pid(),
        (CPU_ROUNDS, CHUNKS, CHUNK),
        |i| call(&sessions[i], "b00__streams_list"),
    )
    .await;
    if let Some(mut perf) = profile {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &perf.id().to_string()])
            .status();
        let _ = perf.wait();
    }
    let medians: Vec<f64> = cpu.iter().map(|runs| median(runs.clone())).collect();
    let mut out = format!(
        "\nThe sidecar's CPU per forwarded call within the TTL (frank's session; the sides take \
         turns every {CHUNK} calls, {} calls per side a round; medians of {CPU_ROUNDS} rounds)\n\
         {:<40} {:>12} {:>10}  rounds\n",
        CHUNK * CHUNKS,
        "sidecar",
        "µs per call",
        "/ off"
    );
    for (i, (label, _)) in sides.iter().enumerate() {
        out += &format!(
            "{:<40} {:>12.1} {:>9.3}x  {:?}\n",
            label,
            medians[i],
            medians[i] / medians[0],
            cpu[i]
                .iter()
                .map(|v| (v * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
    }
    out
}
