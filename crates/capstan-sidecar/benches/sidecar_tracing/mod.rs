//! What tracing costs on the sidecar's hot path (`docs/observability.md`): three sidecars in
//! front of the same minimal upstreams — traces off, on and sampled at 100 %, on and sampled at
//! 1 % — called by the same rmcp client, one session and 32 sessions, alternated round by
//! round, exporting OTLP/HTTP to a local sink that reads each export and answers 200 (a
//! collector's own CPU would compete with the sidecars on this machine; the sink's is next to
//! nothing). The report is the `sidecar_tracing` section of `docs/benchmarks.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::*;

/// The sidecars compared: a label and the environment that sets tracing.
const MODES: [(&str, &[(&str, &str)]); 3] = [
    ("off", &[]),
    ("on, 100 %", &[("OTEL_TRACES_SAMPLER", "always_on")]),
    (
        "on, 1 %",
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ],
    ),
];

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

/// One mode's figures for one load: medians over rounds, and the sidecar's CPU per call (µs).
pub struct Traced {
    pub mode: &'static str,
    pub load: &'static str,
    pub side: Side,
    pub cpu_us: f64,
}

/// The three modes, alternated within each round, for 1 and 32 sessions; then what the sink
/// received (exports, KiB).
pub async fn tracing_cost(urls: &[String], hosts: &[String]) -> (Vec<Traced>, u64, u64) {
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
            Sidecar::start(&documents, hosts, &env)
        })
        .collect();
    let arguments = json!({"text": "orders"});
    let mut figures = Vec::new();
    for (load, sessions, calls) in [
        ("1 session", 1, CALLS),
        ("32 sessions", SESSIONS, CALLS_PER_SESSION),
    ] {
        let mut clients = Vec::new();
        for sidecar in &sidecars {
            let mut mine = Vec::new();
            for _ in 0..sessions {
                mine.push(session(sidecar, None).await);
            }
            run(&mine, "one__echo", &arguments, 5).await;
            clients.push(mine);
        }
        let mut rounds: Vec<Vec<Stats>> = (0..MODES.len()).map(|_| Vec::new()).collect();
        let mut cpu = vec![0.0; MODES.len()];
        for _ in 0..ROUNDS {
            for (index, (sidecar, mine)) in sidecars.iter().zip(&clients).enumerate() {
                let before = cpu_seconds(sidecar.pid());
                let (latencies, wall) = run(mine, "one__echo", &arguments, calls).await;
                cpu[index] += cpu_seconds(sidecar.pid()) - before;
                rounds[index].push(stats(latencies, wall));
            }
        }
        let total = (ROUNDS * sessions * calls) as f64;
        for (index, (mode, _)) in MODES.iter().enumerate() {
            figures.push(Traced {
                mode,
                load,
                side: side(&rounds[index]),
                cpu_us: cpu[index] / total * 1e6,
            });
        }
        for client in clients.into_iter().flatten() {
            let _ = client.cancel().await;
        }
    }
    // The last batches leave within the exporter's schedule delay (5 s by default).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let exports = sink.exports.load(Ordering::Relaxed);
    let kib = sink.bytes.load(Ordering::Relaxed) / 1024;
    (figures, exports, kib)
}

/// The figures as the `sidecar_tracing` section of `docs/benchmarks.md`.
pub fn report_tracing(figures: &[Traced], exports: u64, kib: u64) {
    println!("<!-- bench:sidecar_tracing -->");
    println!("### Tracing on the sidecar's hot path\n");
    println!(
        "Three sidecars in front of the same 3 minimal upstreams, called by the same rmcp \
         client, alternated round by round ({ROUNDS} rounds, medians): traces off; on, \
         sampled at 100 % (`OTEL_TRACES_SAMPLER=always_on`); on, sampled at 1 % \
         (`traceidratio`, 0.01). Both exporting sidecars send OTLP/HTTP to a local sink that \
         reads and acknowledges each export ({exports} exports, {kib} KiB in all).\n"
    );
    println!(
        "| load | tracing | p50 ms | vs off | p99 ms | calls/s | vs off | sidecar CPU µs/call | vs off |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for traced in figures {
        let off = figures
            .iter()
            .find(|f| f.load == traced.load && f.mode == "off")
            .unwrap();
        println!(
            "| {} | {} | {:.3} | {:.2}× | {:.3} | {:.0} | {:.2}× | {:.0} | {:.2}× |",
            traced.load,
            traced.mode,
            traced.side.p50,
            traced.side.p50 / off.side.p50,
            traced.side.p99,
            traced.side.throughput,
            traced.side.throughput / off.side.throughput,
            traced.cpu_us,
            traced.cpu_us / off.cpu_us,
        );
    }
    println!();
    println!("<!-- /bench:sidecar_tracing -->");
}
