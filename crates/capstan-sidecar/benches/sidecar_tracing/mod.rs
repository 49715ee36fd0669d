//! What tracing costs on the sidecar's hot path (`docs/observability.md`): four sidecars in
//! front of the same minimal upstreams — traces off, on and sampled at 100 %, on and sampled at
//! 1 %, on with the default parent-based sampler and a caller whose parent is not sampled —
//! called by the same rmcp client, one session and 32 sessions, alternated round by round, exporting OTLP/HTTP to a local sink that reads each export and answers 200 (a
//! collector's own CPU would compete with the sidecars on this machine; the sink's is next to
//! nothing). The report is the `sidecar_tracing` section of `docs/benchmarks.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::*;

/// The sidecars compared: a label and the environment that sets tracing.
const MODES: [(&str, &[(&str, &str)]); 4] = [
    ("off", &[]),
    ("on, 100 %", &[("OTEL_TRACES_SAMPLER", "always_on")]),
    (
        "on, 1 %",
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ],
    ),
    (
        UNSAMPLED_PARENT,
        &[("OTEL_TRACES_SAMPLER", "parentbased_always_on")],
    ),
];

/// The mode whose client sends a parent it did not sample (`traceparent` flags 00) on every
/// request: a parent-based sampler follows it, and the sidecar builds no span.
const UNSAMPLED_PARENT: &str = "on, parent-based, unsampled parent";

/// The index of that mode in [`MODES`].
fn unsampled_mode() -> usize {
    MODES
        .iter()
        .position(|(mode, _)| *mode == UNSAMPLED_PARENT)
        .unwrap()
}

/// The parent that mode's client sends: valid, not sampled.
const UNSAMPLED_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

/// A session on `sidecar` whose every request names a parent span its caller did not sample.
async fn session_with_unsampled_parent(sidecar: &Sidecar) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri("http://localhost/mcp")
        .custom_headers(
            [
                (
                    http::HeaderName::from_static("x-capstan-project"),
                    http::HeaderValue::from_static("bench"),
                ),
                (
                    http::HeaderName::from_static("traceparent"),
                    http::HeaderValue::from_static(UNSAMPLED_TRACEPARENT),
                ),
            ]
            .into(),
        );
    let client = reqwest::Client::builder()
        .unix_socket(sidecar.socket.as_path())
        .build()
        .unwrap();
    ClientConfig::default()
        .serve(StreamableHttpClientTransport::with_client(client, config))
        .await
        .unwrap()
}

/// An OTLP/HTTP endpoint that reads every export and answers with an empty
/// `ExportTraceServiceResponse`. Hand-written: the bench needs only to count what arrives, and
/// no collector is cheap enough to run beside the sidecars it measures.
struct Sink {
    url: String,
    exports: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl Sink {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (exports, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (e, b) = (exports.clone(), bytes.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, e.clone(), b.clone()));
            }
        });
        Self {
            url,
            exports,
            bytes,
        }
    }
}

/// One keep-alive connection: each request's headers, its body by `content-length`, then 200.
async fn serve(stream: tokio::net::TcpStream, exports: Arc<AtomicU64>, bytes: Arc<AtomicU64>) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        exports.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(length as u64, Ordering::Relaxed);
        let answer =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if reader.get_mut().write_all(answer).await.is_err() {
            return;
        }
    }
}

/// One mode's figures for one load and client: medians over rounds, and the sidecar's CPU per
/// call (µs).
pub struct Traced {
    pub client: &'static str,
    pub mode: &'static str,
    pub load: &'static str,
    pub side: Side,
    pub cpu_us: f64,
    /// The upstream the calls go to, its CPU per call (µs) in the same rounds.
    pub upstream_cpu_us: f64,
}

/// What one measurement of tracing's cost gave: every mode's figures, for both clients, and
/// what the sink received (exports, KiB).
pub struct Tracing {
    pub figures: Vec<Traced>,
    pub exports: u64,
    pub kib: u64,
}

impl Tracing {
    /// Sidecar CPU per call in `mode` over traces off, for `client` at `load`.
    pub fn cpu_ratio(&self, client: &str, load: &str, mode: &str) -> Option<f64> {
        let of = |mode: &str| {
            self.figures
                .iter()
                .find(|f| f.client == client && f.load == load && f.mode == mode)
                .map(|f| f.cpu_us)
        };
        Some(of(mode)? / of("off")?)
    }
}

/// The rmcp client and the independent client.
pub const CLIENTS: [&str; 2] = ["rmcp client", "independent client"];

/// The four modes, alternated within each round, for 1 and 32 sessions, from the rmcp client
/// and then the independent one.
pub async fn tracing_cost(workload: &Workload) -> Tracing {
    let (urls, hosts) = (&workload.urls, &workload.hosts);
    let sink = Sink::start().await;
    let documents = json!(
        ["one", "two", "three"]
            .iter()
            .zip(urls)
            .map(|(name, url)| binding_document(name, name, url, &["echo"]))
            .collect::<Vec<_>>()
    );
    let sidecars: Vec<Sidecar> = MODES
        .iter()
        .map(|(_, env)| {
            let mut env = env.to_vec();
            if !env.is_empty() {
                env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url.as_str()));
            }
            env.extend([
                ("CAPSTAN_MAX_SESSIONS_PER_CALLER", "4096"),
                ("CAPSTAN_MAX_SESSIONS_PER_PROJECT", "4096"),
            ]);
            Sidecar::start(&documents, hosts, &env)
        })
        .collect();
    let upstream = workload.pids[0];
    let mut figures = rmcp_rounds(&sidecars, upstream).await;
    figures.extend(independent_rounds(&sidecars, upstream));
    // The last batches leave within the exporter's schedule delay (5 s by default).
    tokio::time::sleep(Duration::from_secs(6)).await;
    Tracing {
        figures,
        exports: sink.exports.load(Ordering::Relaxed),
        kib: sink.bytes.load(Ordering::Relaxed) / 1024,
    }
}

/// The loads: a label, sessions, calls per session per round.
const LOADS: [(&str, usize, usize); 2] = [
    ("1 session", 1, CALLS),
    ("32 sessions", SESSIONS, CALLS_PER_SESSION),
];

/// The modes' rounds from the rmcp client (this process).
async fn rmcp_rounds(sidecars: &[Sidecar], upstream: u32) -> Vec<Traced> {
    let arguments = json!({"text": "orders"});
    let mut figures = Vec::new();
    for (load, sessions, calls) in LOADS {
        let mut clients = Vec::new();
        for ((mode, _), sidecar) in MODES.iter().zip(sidecars) {
            let mut mine = Vec::new();
            for _ in 0..sessions {
                mine.push(if *mode == UNSAMPLED_PARENT {
                    session_with_unsampled_parent(sidecar).await
                } else {
                    session(sidecar, None).await
                });
            }
            run(&mine, "one__echo", &arguments, 5).await;
            clients.push(mine);
        }
        let mut rounds: Vec<Vec<Stats>> = (0..MODES.len()).map(|_| Vec::new()).collect();
        let mut cpu = vec![0.0; MODES.len()];
        let mut upstream_cpu = vec![0.0; MODES.len()];
        for _ in 0..ROUNDS {
            for (index, (sidecar, mine)) in sidecars.iter().zip(&clients).enumerate() {
                let (before, before_upstream) = (cpu_time(sidecar.pid()), cpu_time(upstream));
                let (latencies, wall) = run(mine, "one__echo", &arguments, calls).await;
                cpu[index] += cpu_time(sidecar.pid()).since(&before);
                upstream_cpu[index] += cpu_time(upstream).since(&before_upstream);
                rounds[index].push(stats(latencies, wall));
            }
        }
        let total = (ROUNDS * sessions * calls) as f64;
        for (index, (mode, _)) in MODES.iter().enumerate() {
            figures.push(Traced {
                client: CLIENTS[0],
                mode,
                load,
                side: side(&rounds[index]),
                cpu_us: cpu[index] / total * 1e6,
                upstream_cpu_us: upstream_cpu[index] / total * 1e6,
            });
        }
        for client in clients.into_iter().flatten() {
            let _ = client.cancel().await;
        }
    }
    figures
}

/// The modes' rounds from the independent client (`mcpload`): one target per mode, alternated
/// by the client, the unsampled parent's `traceparent` sent to its target only.
fn independent_rounds(sidecars: &[Sidecar], upstream: u32) -> Vec<Traced> {
    let mut figures = Vec::new();
    for (load, sessions, calls) in LOADS {
        let mut args: Vec<String> = vec![
            "--header".into(),
            "X-Capstan-Project: bench".into(),
            "--target-header".into(),
            format!(
                "mode{}=traceparent: {UNSAMPLED_TRACEPARENT}",
                unsampled_mode()
            ),
            "--watch".into(),
            format!("upstream={upstream}"),
        ];
        for (index, sidecar) in sidecars.iter().enumerate() {
            args.extend([
                "--target".into(),
                sidecar_independent::sidecar_target(
                    &format!("mode{index}"),
                    sidecar,
                    "echo",
                    "2025-11-25",
                ),
                "--watch".into(),
                format!("mode{index}={}", sidecar.pid()),
            ]);
        }
        args.extend(sidecar_independent::load_args(sessions, calls));
        let report = tokio::task::block_in_place(|| capstan_testkit::mcpload_call(&args));
        for (index, (mode, _)) in MODES.iter().enumerate() {
            let target = format!("mode{index}");
            figures.push(Traced {
                client: CLIENTS[1],
                mode,
                load,
                side: sidecar_independent::medians(&report, &target),
                cpu_us: report[&target]["cpu_us_per_call"][&target]
                    .as_f64()
                    .unwrap_or(0.0),
                upstream_cpu_us: report[&target]["cpu_us_per_call"]["upstream"]
                    .as_f64()
                    .unwrap_or(0.0),
            });
        }
    }
    figures
}

/// The figures of the last run as the `sidecar_tracing` section of `docs/benchmarks.md`.
pub fn report_tracing(tracing: &Tracing) {
    let Tracing {
        figures,
        exports,
        kib,
    } = tracing;
    println!("<!-- bench:sidecar_tracing -->");
    println!("### Tracing on the sidecar's hot path\n");
    println!(
        "Four sidecars in front of the same 3 minimal upstreams, called by the same client, \
         alternated round by round ({ROUNDS} rounds, medians): traces off; on, sampled at \
         100 % (`OTEL_TRACES_SAMPLER=always_on`); on, sampled at 1 % (`traceidratio`, 0.01); \
         on with the default parent-based sampler, the client sending a `traceparent` it did \
         not sample (flags 00) on every request. Measured by the rmcp client, then by the \
         independent one (`mcpload`, one target per sidecar). The exporting sidecars send \
         OTLP/HTTP to a local sink that reads and acknowledges each export ({exports} \
         exports, {kib} KiB in all). A request is sampled or not when it arrives, and an \
         unsampled one builds no span (`docs/observability.md` \"Sampling\").\n"
    );
    println!(
        "| client | load | tracing | p50 ms | vs off | p99 ms | calls/s | vs off | sidecar CPU µs/call | vs off | upstream CPU µs/call |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for traced in figures {
        let off = figures
            .iter()
            .find(|f| f.client == traced.client && f.load == traced.load && f.mode == "off")
            .unwrap();
        println!(
            "| {} | {} | {} | {:.3} | {:.2}× | {:.3} | {:.0} | {:.2}× | {:.0} | {:.2}× | {:.0} |",
            traced.client,
            traced.load,
            traced.mode,
            traced.side.p50,
            traced.side.p50 / off.side.p50,
            traced.side.p99,
            traced.side.throughput,
            traced.side.throughput / off.side.throughput,
            traced.cpu_us,
            traced.cpu_us / off.cpu_us,
            traced.upstream_cpu_us,
        );
    }
    println!();
    println!("<!-- /bench:sidecar_tracing -->");
}
