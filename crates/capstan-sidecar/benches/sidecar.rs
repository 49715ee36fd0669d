//! Sidecar benchmark (`make bench`, `docs/benchmarks.md`): the sidecar's own cost on three
//! workloads — a minimal upstream (`echo-upstream --json`: one tool that returns its argument,
//! no sessions, JSON answers), where nothing hides the sidecar's cost; the same server with
//! sessions, which answers every call as an SSE stream; and the demo provider. For each, with 3
//! upstreams of that kind behind one sidecar:
//!
//! - `tools/call` through the sidecar against the same rmcp client calling the upstream
//!   directly, its connections kept alive on both sides, one session and 32 concurrent
//!   sessions, alternated round by round; with the minimal upstream also through `tcp-hop`, one
//!   byte-copying TCP hop: the floor under any proxy on this machine;
//! - CPU per call of the sidecar, the upstream and the client (process CPU time over the
//!   rounds);
//! - cold session setup (3 upstreams) against one direct `initialize` + `tools/list`,
//!   alternated;
//! - RSS per open session over 1,000 sessions.
//!
//! Once, after the runs: 10,000 sessions held open on one sidecar by the independent client,
//! 3 demo upstreams each (`sidecar_many/mod.rs`): RSS, how fast they opened, a call's p50 with
//! them open.
//!
//! Then a routed call (`cap__web_search`) against the same provider tool by name, and with the
//! minimal upstream the 2026-07-28 revision (no session) against a session revision. The same
//! loads, cold sessions, RSS and revisions again from an independent client
//! (`sidecar_independent/mod.rs`: `mcpload`, the official Go MCP SDK). Release builds, medians;
//! nothing is asserted. The report is a markdown section between `<!-- bench:sidecar -->`
//! markers, which `scripts/bench-report` copies into `docs/benchmarks.md`; its goals table
//! (issue 34) shows each run of `CAPSTAN_BENCH_RUNS` (default 1) and the worst.
//!
//! In every run too, what tracing costs (`sidecar_tracing/mod.rs`): traces off, sampled at
//! 100 % and at 1 %, and a parent-based sampler with an unsampled parent, side by side, from
//! both clients.
//! And the minimal upstream's call rounds again with the sidecar and the hop on one core and
//! the load on the other (`sidecar_pinned/mod.rs`, `taskset`), from both clients; and small
//! calls beside a session sending 4 MiB bodies and one reading a slow answer
//! (`sidecar_head_of_line/mod.rs`).
//!
//! CAPSTAN_BENCH_SESSIONS_ONLY=1 measures session setup and memory alone (printed, no report),
//! for iterating on them; CAPSTAN_BENCH_TRACING_ONLY=1 the tracing rows alone;
//! CAPSTAN_BENCH_CALLS_ONLY=1 the minimal upstream's call rounds alone, with the rmcp client
//! (printed, no report: an A/B of two sidecar binaries swapped between runs takes minutes);
//! CAPSTAN_BENCH_CALLS_ONLY=independent the same rounds from the independent client;
//! CAPSTAN_BENCH_CALLS_ONLY=pinned the pinned rounds alone, from both clients;
//! CAPSTAN_BENCH_HOL_ONLY=1 the head-of-line round alone;
//! CAPSTAN_BENCH_MANY_ONLY=1 the 10,000-session round alone (`sidecar_many/mod.rs`; printed).
//!
//! CAPSTAN_BENCH_PERF=<file> records a CPU profile of the sidecar (`perf record -g`) during the
//! minimal upstream's call rounds: `perf report -i <file>` shows where its time goes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sidecar_head_of_line;
mod sidecar_independent;
mod sidecar_many;
mod sidecar_pinned;
mod sidecar_report;
mod sidecar_tracing;

use std::time::{Duration, Instant};

use capstan_testkit::sidecar::*;
use capstan_testkit::{EchoUpstream, TcpHop};
use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

const ROUNDS: usize = 5;
const CALLS: usize = 400;
const SESSIONS: usize = 32;
const CALLS_PER_SESSION: usize = 50;
const SETUPS: usize = 21;
const OPEN_SESSIONS: usize = 1000;

type Client = RunningService<RoleClient, ClientConfig>;

/// An rmcp client of `url` whose connections are kept alive between requests, on TCP or (with
/// `socket`) on a Unix socket. rmcp's own clients open a connection per request (its reqwest
/// client keeps no idle connection, its Unix socket client dials every request): a TCP
/// handshake and teardown per call on the direct side against a cheap Unix dial on the
/// sidecar's was most of what once made the sidecar look faster than direct
/// (docs/performance.md, "Two harnesses"). Any client an assistant would use keeps its
/// connections, as the independent client does.
fn kept_alive(
    url: &str,
    socket: Option<&std::path::Path>,
    project: Option<&str>,
    token: Option<&str>,
) -> StreamableHttpClientTransport<reqwest::Client> {
    let mut builder = reqwest::Client::builder();
    if let Some(socket) = socket {
        builder = builder.unix_socket(socket);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(project) = project {
        config = config.custom_headers(
            [(
                http::HeaderName::from_static("x-capstan-project"),
                http::HeaderValue::from_str(project).unwrap(),
            )]
            .into(),
        );
    }
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    StreamableHttpClientTransport::with_client(builder.build().unwrap(), config)
}

async fn direct(url: &str) -> Client {
    ClientConfig::default()
        .serve(kept_alive(url, None, None, None))
        .await
        .unwrap()
}

/// A session on `sidecar` as project `bench` (with `token`), its connections kept alive.
async fn session(sidecar: &Sidecar, token: Option<&str>) -> Client {
    let transport = kept_alive(
        "http://localhost/mcp",
        Some(&sidecar.socket),
        Some("bench"),
        token,
    );
    ClientConfig::default().serve(transport).await.unwrap()
}

/// A 2026-07-28 client of `sidecar` (`server/discover`, no session), as [`session`].
async fn modern_client(sidecar: &Sidecar, token: Option<&str>) -> Client {
    discovering(kept_alive(
        "http://localhost/mcp",
        Some(&sidecar.socket),
        Some("bench"),
        token,
    ))
    .await
}

/// A 2026-07-28 client of the upstream at `url`, as [`direct`].
async fn modern_direct(url: &str) -> Client {
    discovering(kept_alive(url, None, None, None)).await
}

async fn discovering(transport: StreamableHttpClientTransport<reqwest::Client>) -> Client {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap()
}

/// Three upstreams of one kind, and the tool the calls go to.
#[derive(Clone)]
struct Workload {
    label: &'static str,
    urls: Vec<String>,
    hosts: Vec<String>,
    pids: Vec<u32>,
    tool: &'static str,
    arguments: Value,
    include: Vec<&'static str>,
    /// `tcp-hop` in front of the first upstream, if this workload measures the hop: its URL
    /// and process id.
    hop: Option<(String, u32)>,
    /// Only the call rounds (no cold sessions, no RSS): a variant of another workload.
    calls_only: bool,
    /// The proxies on a core of their own, the load on the other (`sidecar_pinned/mod.rs`):
    /// the call rounds only, no revisions.
    pinned: bool,
}

fn params(name: &str, arguments: &Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}

/// Per-call latencies and the wall time of `clients` calling `tool` concurrently.
async fn run(
    clients: &[Client],
    tool: &str,
    arguments: &Value,
    calls_each: usize,
) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let per_client = futures::future::join_all(clients.iter().map(|client| async move {
        let mut latencies = Vec::with_capacity(calls_each);
        for _ in 0..calls_each {
            let t = Instant::now();
            let result = client.call_tool(params(tool, arguments)).await.unwrap();
            assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One round's figures: p50 and p99 (ms), calls per second.
struct Stats {
    p50: f64,
    p99: f64,
    throughput: f64,
}

fn stats(mut latencies: Vec<Duration>, wall: Duration) -> Stats {
    latencies.sort();
    Stats {
        p50: ms(percentile(&latencies, 0.5)),
        p99: ms(percentile(&latencies, 0.99)),
        throughput: latencies.len() as f64 / wall.as_secs_f64(),
    }
}

/// Medians over rounds of one side (direct or through the sidecar) of one load.
struct Side {
    p50: f64,
    p99: f64,
    throughput: f64,
}

fn side(rounds: &[Stats]) -> Side {
    Side {
        p50: median(rounds.iter().map(|s| s.p50).collect()),
        p99: median(rounds.iter().map(|s| s.p99).collect()),
        throughput: median(rounds.iter().map(|s| s.throughput).collect()),
    }
}

/// A load (1 or 32 sessions) measured both ways, with CPU per call in µs.
struct Load {
    label: &'static str,
    calls: usize,
    direct: Side,
    sidecar: Side,
    sidecar_cpu_us: f64,
    upstream_cpu_us_direct: f64,
    upstream_cpu_us_sidecar: f64,
    /// The client's own (this process's) CPU per call in µs: direct, through the sidecar.
    client_cpu_us: (f64, f64),
    /// Through `tcp-hop` (one byte-copying hop), and the hop's CPU per call in µs.
    hop: Option<(Side, f64)>,
}

struct Figures {
    label: &'static str,
    loads: Vec<Load>,
    setup_sidecar_ms: f64,
    setup_direct_ms: f64,
    rss_per_session_kib: f64,
    routed: Option<(f64, f64, usize)>,
    revisions: Option<Revisions>,
}

impl Figures {
    /// The figures of a workload measured in its call rounds only (no cold sessions, no RSS).
    fn calls_only(
        label: &'static str,
        loads: Vec<Load>,
        routed: Option<(f64, f64, usize)>,
        revisions: Option<Revisions>,
    ) -> Self {
        Self {
            label,
            loads,
            setup_sidecar_ms: 0.0,
            setup_direct_ms: 0.0,
            rss_per_session_kib: 0.0,
            routed,
            revisions,
        }
    }
}

/// 2026-07-28 against a session revision ([`revisions`]), through the sidecar and (the same
/// client, the same revisions) directly to the upstream.
struct Revisions {
    call_session_ms: f64,
    call_sessionless_ms: f64,
    direct_session_ms: f64,
    direct_sessionless_ms: f64,
    calls: usize,
    /// A new caller's first request: `initialize`, `server/discover` (ms), where measured.
    setup: Option<(f64, f64)>,
}

impl Revisions {
    /// A call without a session over one in a session, through the sidecar.
    fn through(&self) -> f64 {
        self.call_sessionless_ms / self.call_session_ms
    }

    /// The same, the same client calling the upstream directly.
    fn direct(&self) -> f64 {
        self.direct_sessionless_ms / self.direct_session_ms
    }

    /// What the sidecar adds to the difference: 1 when it serves both alike.
    fn sidecar_share(&self) -> f64 {
        self.through() / self.direct()
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    capstan_testkit::install_crypto_provider();
    let demo = [
        DemoProvider::start(&[]),
        DemoProvider::start(&[]),
        DemoProvider::start(&[]),
    ];
    // The minimal upstream answers JSON (no sessions), so a client calling it directly parses
    // what it parses through the sidecar; the same server with sessions answers every call as
    // an SSE stream, which costs an rmcp client more than JSON (docs/performance.md, "Two
    // harnesses").
    let echo = [
        EchoUpstream::start_json(),
        EchoUpstream::start_json(),
        EchoUpstream::start_json(),
    ];
    let echo_sse = [
        EchoUpstream::start(),
        EchoUpstream::start(),
        EchoUpstream::start(),
    ];
    let hop = TcpHop::start(echo[0].address);
    let minimal = |label, echo: &[EchoUpstream; 3], hop: Option<&TcpHop>| Workload {
        label,
        urls: echo.iter().map(EchoUpstream::url).collect(),
        hosts: echo.iter().map(EchoUpstream::host).collect(),
        pids: echo.iter().map(EchoUpstream::pid).collect(),
        tool: "echo",
        arguments: json!({"text": "orders"}),
        include: vec!["echo"],
        hop: hop.map(|hop| (format!("http://{}/mcp", hop.address), hop.pid())),
        calls_only: hop.is_none(),
        pinned: false,
    };
    let workloads = [
        minimal("minimal upstream", &echo, Some(&hop)),
        minimal("minimal upstream, SSE answers", &echo_sse, None),
        Workload {
            label: "demo provider",
            urls: demo.iter().map(|p| p.url("/mcp")).collect(),
            hosts: demo.iter().map(DemoProvider::host).collect(),
            pids: demo.iter().map(DemoProvider::pid).collect(),
            tool: "streams_get",
            arguments: json!({"name": "orders"}),
            include: vec!["streams_get", "streams_list", "docs_search"],
            hop: None,
            calls_only: false,
            pinned: false,
        },
    ];
    let calls_only = std::env::var("CAPSTAN_BENCH_CALLS_ONLY").unwrap_or_default();
    if calls_only == "1" || calls_only == "independent" {
        let mut workload = minimal("minimal upstream", &echo, Some(&hop));
        workload.calls_only = true;
        print_calls(&if calls_only == "1" {
            measure(&workload).await
        } else {
            sidecar_independent::independent(&workload).await
        });
        return;
    }
    if calls_only == "pinned" {
        if let Some(pinned) = sidecar_pinned::pinned(&workloads[0]).await {
            print_calls(&pinned.rmcp);
            print_calls(&pinned.independent);
        }
        return;
    }
    // The 10,000-session round runs on the demo provider, the goals' memory workload.
    let demo_workload = &workloads[2];
    if std::env::var("CAPSTAN_BENCH_MANY_ONLY").is_ok_and(|v| v == "1") {
        let mut out = String::new();
        sidecar_many::report_many(&mut out, &sidecar_many::many(demo_workload).await);
        println!("{out}");
        return;
    }
    if std::env::var("CAPSTAN_BENCH_HOL_ONLY").is_ok_and(|v| v == "1") {
        let mut out = String::new();
        sidecar_head_of_line::report_head_of_line(
            &mut out,
            &sidecar_head_of_line::head_of_line().await,
        );
        println!("{out}");
        return;
    }
    let tracing_only = std::env::var("CAPSTAN_BENCH_TRACING_ONLY").is_ok_and(|v| v == "1");
    if tracing_only {
        let tracing = sidecar_tracing::tracing_cost(&workloads[0]).await;
        sidecar_tracing::report_tracing(&tracing);
        return;
    }
    let mut runs = Vec::new();
    for run in 0..runs_wanted() {
        if run > 0 {
            eprintln!("sidecar bench: run {} of {}", run + 1, runs_wanted());
        }
        let mut figures = Vec::new();
        for workload in &workloads {
            figures.push(measure(workload).await);
        }
        let mut independent = Vec::new();
        for workload in workloads.iter().filter(|_| !sessions_only()) {
            independent.push(sidecar_independent::independent(workload).await);
        }
        let (tracing, pinned, head_of_line) = if sessions_only() {
            (None, None, None)
        } else {
            (
                Some(sidecar_tracing::tracing_cost(&workloads[0]).await),
                sidecar_pinned::pinned(&workloads[0]).await,
                Some(sidecar_head_of_line::head_of_line().await),
            )
        };
        runs.push(Run {
            figures,
            independent,
            tracing,
            pinned,
            head_of_line,
        });
    }
    let many = if sessions_only() {
        None
    } else {
        Some(sidecar_many::many(demo_workload).await)
    };
    if let Some(tracing) = runs.last().and_then(|run| run.tracing.as_ref()) {
        sidecar_tracing::report_tracing(tracing);
    }
    if sessions_only() {
        for f in runs.iter().flat_map(|r| &r.figures) {
            println!(
                "{}: cold session {:.2} ms vs direct {:.2} ms; RSS per open session {:.0} KiB",
                f.label, f.setup_sidecar_ms, f.setup_direct_ms, f.rss_per_session_kib
            );
        }
        return;
    }
    sidecar_report::report(&runs, many.as_ref());
}

/// The call rounds of `figures`, one line per load (`CAPSTAN_BENCH_CALLS_ONLY`).
fn print_calls(figures: &Figures) {
    for load in &figures.loads {
        let hop = load.hop.as_ref().map_or(String::new(), |(hop, _)| {
            format!("; hop p50 {:.3} ms", hop.p50)
        });
        println!(
            "{}, {}: p50 {:.3} ms vs direct {:.3} ms ({:.2}×); {:.0} vs {:.0} calls/s ({:.2}×); \
             sidecar CPU {:.0} µs/call, upstream's {:.0} µs{hop}",
            figures.label,
            load.label,
            load.sidecar.p50,
            load.direct.p50,
            load.sidecar.p50 / load.direct.p50,
            load.sidecar.throughput,
            load.direct.throughput,
            load.sidecar.throughput / load.direct.throughput,
            load.sidecar_cpu_us,
            load.upstream_cpu_us_direct,
        );
    }
    if let Some(r) = &figures.revisions {
        println!(
            "{}, 2026-07-28: tools/call p50 {:.3} ms without a session vs {:.3} ms in one \
             ({:.2}×); directly {:.3} vs {:.3} ms ({:.2}×)",
            figures.label,
            r.call_sessionless_ms,
            r.call_session_ms,
            r.through(),
            r.direct_sessionless_ms,
            r.direct_session_ms,
            r.direct(),
        );
    }
}

/// How many times the whole measurement runs (`CAPSTAN_BENCH_RUNS`, default 1): the tables show
/// the last run, the goals each run and the worst.
fn runs_wanted() -> usize {
    std::env::var("CAPSTAN_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// One run's figures: the rmcp client's and the independent client's, each per workload.
struct Run {
    figures: Vec<Figures>,
    independent: Vec<Figures>,
    /// What tracing cost in this run (`sidecar_tracing/mod.rs`).
    tracing: Option<sidecar_tracing::Tracing>,
    /// The minimal upstream's call rounds with the proxies on a core of their own
    /// (`sidecar_pinned/mod.rs`).
    pinned: Option<sidecar_pinned::Pinned>,
    /// Small calls beside busy sessions (`sidecar_head_of_line/mod.rs`).
    head_of_line: Option<sidecar_head_of_line::HeadOfLine>,
}

/// Whether only session setup and memory are measured (`CAPSTAN_BENCH_SESSIONS_ONLY=1`).
fn sessions_only() -> bool {
    std::env::var("CAPSTAN_BENCH_SESSIONS_ONLY").is_ok_and(|v| v == "1")
}

/// The documents of a sidecar in front of `workload`'s three upstreams (servers one, two,
/// three). With the demo provider, one and two also serve cap.web.search (docs_search) and
/// compete for it.
fn documents(workload: &Workload) -> Value {
    let mut documents = json!(
        ["one", "two", "three"]
            .iter()
            .zip(&workload.urls)
            .map(|(name, url)| binding_document(name, name, url, &workload.include))
            .collect::<Vec<_>>()
    );
    if workload.include.contains(&"docs_search") {
        for (index, (cost, quality)) in [(1000, 9000), (4000, 6000)].into_iter().enumerate() {
            documents[index]["spec"]["tools"]["mcpServers"][0]["capabilities"] = json!([{
                "capabilityId": "cap.web.search", "tool": "docs_search",
                "costHint": {"baseMicrosUsd": cost}, "quality": quality
            }]);
        }
    }
    documents
}

async fn measure(workload: &Workload) -> Figures {
    // Metering on, to a file, as in production (one JSON line per provider call).
    // One caller opens the 1,000 sessions (and their GET streams) the RSS figure needs: room
    // for all of them under every cap.
    let sidecar = Sidecar::start(
        &documents(workload),
        &workload.hosts,
        &[
            ("CAPSTAN_MAX_SESSIONS", "4096"),
            ("CAPSTAN_MAX_SESSIONS_PER_CALLER", "4096"),
            ("CAPSTAN_MAX_SESSIONS_PER_PROJECT", "4096"),
        ],
    );
    sidecar_pinned::pin_sidecar(workload, &sidecar);
    let perf = std::env::var("CAPSTAN_BENCH_PERF")
        .ok()
        .filter(|_| workload.label == "minimal upstream")
        .map(|out| {
            std::process::Command::new("perf")
                .args(["record", "-F", "999", "-g", "-o", &out, "-p"])
                .arg(sidecar.pid().to_string())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        });
    let upstream = workload.pids[0];
    let namespaced = format!("one__{}", workload.tool);
    let mut loads = Vec::new();
    let call_loads = [
        ("1 session", 1, CALLS),
        ("32 sessions", SESSIONS, CALLS_PER_SESSION),
    ];
    for (label, sessions, calls) in call_loads.into_iter().filter(|_| !sessions_only()) {
        let mut direct_clients = Vec::new();
        let mut sidecar_clients = Vec::new();
        let mut hop_clients = Vec::new();
        for _ in 0..sessions {
            direct_clients.push(direct(&workload.urls[0]).await);
            sidecar_clients.push(session(&sidecar, None).await);
            if let Some((url, _)) = &workload.hop {
                hop_clients.push(direct(url).await);
            }
        }
        // Warm-up.
        run(&direct_clients, workload.tool, &workload.arguments, 5).await;
        run(&sidecar_clients, &namespaced, &workload.arguments, 5).await;
        run(&hop_clients, workload.tool, &workload.arguments, 5).await;
        let (mut straight, mut through, mut hopped) = (Vec::new(), Vec::new(), Vec::new());
        let (mut sidecar_cpu, mut upstream_direct, mut upstream_through) = (0.0, 0.0, 0.0);
        let (mut hop_cpu, mut client_direct, mut client_through) = (0.0, 0.0, 0.0);
        let me = std::process::id();
        for _ in 0..ROUNDS {
            if let Some((_, pid)) = &workload.hop {
                let before = cpu_time(*pid);
                let (l, w) = run(&hop_clients, workload.tool, &workload.arguments, calls).await;
                hop_cpu += cpu_time(*pid).since(&before);
                hopped.push(stats(l, w));
            }
            let (before, before_client) = (cpu_time(upstream), cpu_time(me));
            let (l, w) = run(&direct_clients, workload.tool, &workload.arguments, calls).await;
            upstream_direct += cpu_time(upstream).since(&before);
            client_direct += cpu_time(me).since(&before_client);
            straight.push(stats(l, w));
            let (before, before_sidecar) = (cpu_time(upstream), cpu_time(sidecar.pid()));
            let before_client = cpu_time(me);
            let (l, w) = run(&sidecar_clients, &namespaced, &workload.arguments, calls).await;
            sidecar_cpu += cpu_time(sidecar.pid()).since(&before_sidecar);
            upstream_through += cpu_time(upstream).since(&before);
            client_through += cpu_time(me).since(&before_client);
            through.push(stats(l, w));
        }
        for client in direct_clients
            .into_iter()
            .chain(sidecar_clients)
            .chain(hop_clients)
        {
            let _ = client.cancel().await;
        }
        let total = (ROUNDS * sessions * calls) as f64;
        loads.push(Load {
            label,
            calls: sessions * calls,
            direct: side(&straight),
            sidecar: side(&through),
            sidecar_cpu_us: sidecar_cpu / total * 1e6,
            upstream_cpu_us_direct: upstream_direct / total * 1e6,
            upstream_cpu_us_sidecar: upstream_through / total * 1e6,
            client_cpu_us: (client_direct / total * 1e6, client_through / total * 1e6),
            hop: (!hopped.is_empty()).then(|| (side(&hopped), hop_cpu / total * 1e6)),
        });
    }
    if let Some(mut perf) = perf {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &perf.id().to_string()])
            .status();
        let _ = perf.wait();
    }

    let revisions = if workload.hop.is_some() && !workload.pinned && !sessions_only() {
        Some(revisions(&sidecar, workload).await)
    } else {
        None
    };
    let routed = if workload.include.contains(&"docs_search") && !sessions_only() {
        Some(routed_vs_named(&sidecar).await)
    } else {
        None
    };
    if workload.calls_only {
        return Figures::calls_only(workload.label, loads, routed, revisions);
    }

    // Cold session setup: the sidecar's initialize (compose 3 bindings, connect and list 3
    // upstreams) against one direct initialize + tools/list, alternated.
    let (mut through_setup, mut direct_setup) = (Vec::new(), Vec::new());
    for _ in 0..SETUPS {
        let started = Instant::now();
        let session = session(&sidecar, None).await;
        through_setup.push(ms(started.elapsed()));
        let _ = session.cancel().await;
        let started = Instant::now();
        let client = direct(&workload.urls[0]).await;
        client.list_all_tools().await.unwrap();
        direct_setup.push(ms(started.elapsed()));
        let _ = client.cancel().await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // RSS per open session. CAPSTAN_BENCH_HOLD=<seconds> waits that long before opening them
    // and again with them open, for a heap profiler to attach (`heaptrack -p <pid>`).
    let hold = std::env::var("CAPSTAN_BENCH_HOLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs);
    if let Some(hold) = hold {
        eprintln!(
            "{}: sidecar pid {}, holding {hold:?}",
            workload.label,
            sidecar.pid()
        );
        tokio::time::sleep(hold).await;
    }
    let before = rss_kib(sidecar.pid());
    let mut open = Vec::with_capacity(OPEN_SESSIONS);
    for _ in 0..OPEN_SESSIONS {
        open.push(session(&sidecar, None).await);
    }
    let after = rss_kib(sidecar.pid());
    if let Some(hold) = hold {
        eprintln!(
            "{}: {OPEN_SESSIONS} sessions open, holding {hold:?}",
            workload.label
        );
        tokio::time::sleep(hold).await;
    }
    for session in open {
        let _ = session.cancel().await;
    }
    Figures {
        label: workload.label,
        loads,
        setup_sidecar_ms: median(through_setup),
        setup_direct_ms: median(direct_setup),
        rss_per_session_kib: (after - before) / OPEN_SESSIONS as f64,
        routed,
        revisions,
    }
}

/// 2026-07-28 against a session revision through the same sidecar: `tools/call` of `tool`
/// alternated call by call between a session (2025-11-25, answered by `edge/tools_call.rs`) and a
/// client without one (each request checked and served by the caller's task), and the first
/// request of a new caller — `initialize` against `server/discover`, each composing a task —
/// alternated. (call p50 session, call p50 2026-07-28, calls each, setup p50 session, setup
/// p50 2026-07-28.)
async fn revisions(sidecar: &Sidecar, workload: &Workload) -> Revisions {
    let (upstream, tool, arguments) = (&workload.urls[0], workload.tool, &workload.arguments);
    let namespaced = format!("one__{tool}");
    let in_session = session(sidecar, Some("revisions")).await;
    let modern = modern_client(sidecar, Some("revisions")).await;
    // What the upstream and the client themselves spend on each revision: the same calls
    // directly, alternated with the others.
    let direct_session = direct(upstream).await;
    let direct_modern = modern_direct(upstream).await;
    let clients = [
        (&in_session, namespaced.as_str()),
        (&modern, namespaced.as_str()),
        (&direct_session, tool),
        (&direct_modern, tool),
    ];
    for _ in 0..20 {
        for (client, tool) in clients {
            client.call_tool(params(tool, arguments)).await.unwrap();
        }
    }
    let mut latencies = [(); 4].map(|()| Vec::new());
    for _ in 0..ROUNDS * CALLS {
        for ((client, tool), into) in clients.iter().zip(&mut latencies) {
            let started = Instant::now();
            let result = client.call_tool(params(tool, arguments)).await.unwrap();
            assert_ne!(result.is_error, Some(true), "{result:?}");
            into.push(started.elapsed());
        }
    }
    for client in [in_session, modern, direct_session, direct_modern] {
        let _ = client.cancel().await;
    }
    let [with_session, without, direct_with, direct_without] = latencies.map(|mut calls| {
        calls.sort();
        ms(percentile(&calls, 0.5))
    });
    let (mut initialize, mut discover) = (Vec::new(), Vec::new());
    for round in 0..SETUPS {
        // A token per round: each first request composes a task of its own.
        let token = format!("setup-{round}");
        let started = Instant::now();
        let opened = session(sidecar, Some(&token)).await;
        initialize.push(ms(started.elapsed()));
        let _ = opened.cancel().await;
        let token = format!("setup-modern-{round}");
        let started = Instant::now();
        let client = modern_client(sidecar, Some(&token)).await;
        discover.push(ms(started.elapsed()));
        let _ = client.cancel().await;
    }
    Revisions {
        call_session_ms: with_session,
        call_sessionless_ms: without,
        direct_session_ms: direct_with,
        direct_sessionless_ms: direct_without,
        calls: ROUNDS * CALLS,
        setup: Some((median(initialize), median(discover))),
    }
}

/// Routed vs namespaced: the same provider tool, called as cap__web_search and as
/// one__docs_search, alternated call by call in one session. (p50 routed, p50 named, calls
/// each.)
async fn routed_vs_named(sidecar: &Sidecar) -> (f64, f64, usize) {
    let session = session(sidecar, None).await;
    let query = json!({"query": "consumer lag"});
    for _ in 0..20 {
        for tool in ["cap__web_search", "one__docs_search"] {
            session.call_tool(params(tool, &query)).await.unwrap();
        }
    }
    let (mut routed, mut named) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS * CALLS {
        for (tool, into) in [
            ("cap__web_search", &mut routed),
            ("one__docs_search", &mut named),
        ] {
            let started = Instant::now();
            let result = session.call_tool(params(tool, &query)).await.unwrap();
            assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
            into.push(started.elapsed());
        }
    }
    let _ = session.cancel().await;
    routed.sort();
    named.sort();
    (
        ms(percentile(&routed, 0.5)),
        ms(percentile(&named, 0.5)),
        routed.len(),
    )
}
