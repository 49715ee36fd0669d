//! The sidecar's figures as a client that is not the project's sees them: `mcpload`
//! (`e2e/tools/mcpload`, the official Go MCP SDK) against the same upstreams, directly, through
//! `tcp-hop` and through the sidecar, the targets alternated round by round inside one client
//! process. Its own CPU per call is measured per target like the sidecar's and the upstream's,
//! so a ratio here is what an outside user would measure (`docs/benchmarks.md`).

use capstan_testkit::{OpenSessions, mcpload_call};

use super::*;

/// One target's figures in one load: medians over rounds, CPU per call in µs.
#[derive(Clone, Copy, Default)]
pub struct Target {
    pub p50: f64,
    pub p99: f64,
    pub throughput: f64,
    pub client_cpu_us: f64,
    pub sidecar_cpu_us: f64,
    pub upstream_cpu_us: f64,
    pub hop_cpu_us: f64,
}

fn target(report: &Value, name: &str) -> Target {
    let t = &report[name];
    let cpu = |label: &str| t["cpu_us_per_call"][label].as_f64().unwrap_or(0.0);
    Target {
        p50: t["p50_ms"].as_f64().unwrap_or(0.0),
        p99: t["p99_ms"].as_f64().unwrap_or(0.0),
        throughput: t["calls_per_s"].as_f64().unwrap_or(0.0),
        client_cpu_us: t["client_cpu_us_per_call"].as_f64().unwrap_or(0.0),
        sidecar_cpu_us: cpu("sidecar"),
        upstream_cpu_us: cpu("upstream"),
        hop_cpu_us: cpu("hop"),
    }
}

pub struct IndependentLoad {
    pub label: &'static str,
    pub calls: usize,
    pub direct: Target,
    pub sidecar: Target,
    pub hop: Option<Target>,
}

/// The independent client's figures on one workload.
pub struct Independent {
    pub label: &'static str,
    pub loads: Vec<IndependentLoad>,
    /// Cold session (connect, initialize, tools/list, close): through the sidecar (3
    /// upstreams), directly (1 upstream).
    pub setup_sidecar_ms: f64,
    pub setup_direct_ms: f64,
    pub rss_per_session_kib: f64,
    /// `tools/call` p50 in a 2025-11-25 session and without one (2026-07-28), same run.
    pub revisions: Option<(f64, f64)>,
}

/// `--target` for the sidecar: its socket, `tool` namespaced under binding one.
fn sidecar_target(name: &str, sidecar: &Sidecar, tool: &str, protocol: &str) -> String {
    format!(
        "{name},unix:{},one__{tool},{protocol}",
        sidecar.socket.display()
    )
}

fn common_args(workload: &Workload) -> Vec<String> {
    vec![
        "--header".into(),
        "X-Capstan-Project: bench".into(),
        "--args".into(),
        workload.arguments.to_string(),
    ]
}

/// Measures `workload` with the independent client, on a sidecar of its own.
pub async fn independent(workload: &Workload) -> Independent {
    let sidecar = Sidecar::start(
        &documents(workload),
        &workload.hosts,
        &[
            ("CAPSTAN_MAX_SESSIONS", "4096"),
            ("CAPSTAN_MAX_SESSIONS_PER_CALLER", "4096"),
            ("CAPSTAN_MAX_SESSIONS_PER_PROJECT", "4096"),
        ],
    );
    let tool = workload.tool;
    let mut loads = Vec::new();
    for (label, sessions, calls) in [
        ("1 session", 1, CALLS),
        ("32 sessions", SESSIONS, CALLS_PER_SESSION),
    ] {
        let mut args = common_args(workload);
        args.extend([
            "--target".into(),
            format!("direct,{},{tool},2025-11-25", workload.urls[0]),
            "--target".into(),
            sidecar_target("sidecar", &sidecar, tool, "2025-11-25"),
            "--watch".into(),
            format!("sidecar={}", sidecar.pid()),
            "--watch".into(),
            format!("upstream={}", workload.pids[0]),
        ]);
        if let Some((url, pid)) = &workload.hop {
            args.extend([
                "--target".into(),
                format!("hop,{url},{tool},2025-11-25"),
                "--watch".into(),
                format!("hop={pid}"),
            ]);
        }
        args.extend([
            "--sessions".into(),
            sessions.to_string(),
            "--calls".into(),
            calls.to_string(),
            "--rounds".into(),
            ROUNDS.to_string(),
        ]);
        let report = tokio::task::block_in_place(|| mcpload_call(&args));
        loads.push(IndependentLoad {
            label,
            calls: sessions * calls,
            direct: target(&report, "direct"),
            sidecar: target(&report, "sidecar"),
            hop: workload.hop.as_ref().map(|_| target(&report, "hop")),
        });
    }
    let revisions = workload.hop.as_ref().map(|_| {
        let mut args = common_args(workload);
        args.extend([
            "--target".into(),
            sidecar_target("session", &sidecar, tool, "2025-11-25"),
            "--target".into(),
            sidecar_target("sessionless", &sidecar, tool, "2026-07-28"),
            "--calls".into(),
            CALLS.to_string(),
            "--rounds".into(),
            ROUNDS.to_string(),
        ]);
        let report = tokio::task::block_in_place(|| mcpload_call(&args));
        (
            target(&report, "session").p50,
            target(&report, "sessionless").p50,
        )
    });
    if workload.calls_only {
        return Independent {
            label: workload.label,
            loads,
            setup_sidecar_ms: 0.0,
            setup_direct_ms: 0.0,
            rss_per_session_kib: 0.0,
            revisions,
        };
    }
    let mut args = common_args(workload);
    args.extend([
        "--target".into(),
        sidecar_target("sidecar", &sidecar, tool, "2025-11-25"),
        "--target".into(),
        format!("direct,{},{tool},2025-11-25", workload.urls[0]),
        "--rounds".into(),
        "0".into(),
        "--warmup".into(),
        "0".into(),
        "--setups".into(),
        SETUPS.to_string(),
    ]);
    let report = tokio::task::block_in_place(|| mcpload_call(&args));
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = rss_kib(sidecar.pid());
    let mut args = common_args(workload);
    args.extend([
        "--target".into(),
        sidecar_target("sidecar", &sidecar, tool, "2025-11-25"),
        "--sessions".into(),
        OPEN_SESSIONS.to_string(),
    ]);
    let open = tokio::task::block_in_place(|| OpenSessions::open(&args));
    let after = rss_kib(sidecar.pid());
    drop(open);
    Independent {
        label: workload.label,
        loads,
        setup_sidecar_ms: report["sidecar"]["setup_p50_ms"].as_f64().unwrap_or(0.0),
        setup_direct_ms: report["direct"]["setup_p50_ms"].as_f64().unwrap_or(0.0),
        rss_per_session_kib: (after - before) / OPEN_SESSIONS as f64,
        revisions,
    }
}

/// The independent client's rows, in the same shape as the rmcp client's.
pub fn report_independent(out: &mut String, figures: &[Independent]) {
    out.push_str(
        "\nThe same loads from an independent client, `mcpload` (the official Go MCP SDK, \
         `e2e/tools/mcpload`), against the same upstreams, in one client process alternating \
         the targets round by round; CPU per call of the client itself too.\n\n\
         | workload | load | calls/round | direct p50 | p99 | calls/s | sidecar p50 | p99 | calls/s | p50 ratio | throughput ratio | hop p50 | hop calls/s | sidecar CPU/call | hop CPU/call | upstream CPU/call (direct, via sidecar) | client CPU/call (direct, via sidecar) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for f in figures {
        for l in &f.loads {
            let (hop_p50, hop_rate, hop_cpu) =
                l.hop.map_or(("–".into(), "–".into(), "–".into()), |h| {
                    (
                        format!("{:.3} ms", h.p50),
                        format!("{:.0}", h.throughput),
                        format!("{:.0} µs", h.hop_cpu_us),
                    )
                });
            out.push_str(&format!(
                "| {} | {} | {} | {:.3} ms | {:.3} ms | {:.0} | {:.3} ms | {:.3} ms | {:.0} | {:.2}× | {:.2}× | {hop_p50} | {hop_rate} | {:.0} µs | {hop_cpu} | {:.0} µs, {:.0} µs | {:.0} µs, {:.0} µs |\n",
                f.label,
                l.label,
                l.calls,
                l.direct.p50,
                l.direct.p99,
                l.direct.throughput,
                l.sidecar.p50,
                l.sidecar.p99,
                l.sidecar.throughput,
                l.sidecar.p50 / l.direct.p50,
                l.sidecar.throughput / l.direct.throughput,
                l.sidecar.sidecar_cpu_us,
                l.direct.upstream_cpu_us,
                l.sidecar.upstream_cpu_us,
                l.direct.client_cpu_us,
                l.sidecar.client_cpu_us,
            ));
        }
    }
    out.push_str(
        "\n| workload | cold session, 3 upstreams | direct, 1 upstream | ratio | RSS per open session |\n|---|---|---|---|---|\n",
    );
    for f in figures.iter().filter(|f| f.rss_per_session_kib > 0.0) {
        out.push_str(&format!(
            "| {} | {:.2} ms | {:.2} ms | {:.2}× | {:.0} KiB |\n",
            f.label,
            f.setup_sidecar_ms,
            f.setup_direct_ms,
            f.setup_sidecar_ms / f.setup_direct_ms,
            f.rss_per_session_kib
        ));
    }
    for f in figures {
        if let Some((session, sessionless)) = f.revisions {
            out.push_str(&format!(
                "\n2026-07-28 beside a session ({}, independent client): `tools/call` p50 {sessionless:.3} ms without a session against {session:.3} ms in a 2025-11-25 session: {:.2}×.\n",
                f.label,
                sessionless / session
            ));
        }
    }
}
