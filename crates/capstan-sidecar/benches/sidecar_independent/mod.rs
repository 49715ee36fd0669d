//! The sidecar's figures as a client that is not the project's sees them: `mcpload`
//! (`e2e/tools/mcpload`, the official Go MCP SDK) against the same upstreams, directly, through
//! `tcp-hop` and through the sidecar, the targets alternated round by round inside one client
//! process. Its own CPU per call is measured per target like the sidecar's and the upstream's,
//! so a ratio here is what an outside user would measure (`docs/benchmarks.md`).

use capstan_testkit::{OpenSessions, mcpload_call};

use super::*;

/// One target's medians in an `mcpload call` report.
pub(crate) fn medians(report: &Value, target: &str) -> Side {
    let t = &report[target];
    Side {
        p50: t["p50_ms"].as_f64().unwrap_or(0.0),
        p99: t["p99_ms"].as_f64().unwrap_or(0.0),
        throughput: t["calls_per_s"].as_f64().unwrap_or(0.0),
    }
}

/// CPU per call in µs during `target`'s rounds: the client's own (`client`) or a watched
/// process's.
fn cpu(report: &Value, target: &str, whose: &str) -> f64 {
    let t = &report[target];
    let value = match whose {
        "client" => &t["client_cpu_us_per_call"],
        watched => &t["cpu_us_per_call"][watched],
    };
    value.as_f64().unwrap_or(0.0)
}

/// `--target` for the sidecar: its socket, `tool` namespaced under binding one.
pub(crate) fn sidecar_target(name: &str, sidecar: &Sidecar, tool: &str, protocol: &str) -> String {
    format!(
        "{name},unix:{},one__{tool},{protocol}",
        sidecar.socket.display()
    )
}

/// `mcpload call`'s load: `sessions` per target, `calls` per session per round, [`ROUNDS`]
/// rounds.
pub(crate) fn load_args(sessions: usize, calls: usize) -> [String; 6] {
    [
        "--sessions".into(),
        sessions.to_string(),
        "--calls".into(),
        calls.to_string(),
        "--rounds".into(),
        ROUNDS.to_string(),
    ]
}

pub(crate) fn common_args(workload: &Workload) -> Vec<String> {
    vec![
        "--header".into(),
        "X-Capstan-Project: bench".into(),
        "--args".into(),
        workload.arguments.to_string(),
    ]
}

/// Measures `workload` with the independent client, on a sidecar of its own: the figures the
/// rmcp client's rounds give (`measure`), but routing.
pub async fn independent(workload: &Workload) -> Figures {
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
        args.extend(load_args(sessions, calls));
        let report = tokio::task::block_in_place(|| mcpload_call(&args));
        loads.push(Load {
            label,
            calls: sessions * calls,
            direct: medians(&report, "direct"),
            sidecar: medians(&report, "sidecar"),
            sidecar_cpu_us: cpu(&report, "sidecar", "sidecar"),
            upstream_cpu_us_direct: cpu(&report, "direct", "upstream"),
            upstream_cpu_us_sidecar: cpu(&report, "sidecar", "upstream"),
            client_cpu_us: (
                cpu(&report, "direct", "client"),
                cpu(&report, "sidecar", "client"),
            ),
            hop: workload
                .hop
                .as_ref()
                .map(|_| (medians(&report, "hop"), cpu(&report, "hop", "hop"))),
        });
    }
    let revisions = workload.hop.as_ref().filter(|_| !workload.pinned).map(|_| {
        let mut args = common_args(workload);
        args.extend([
            "--target".into(),
            sidecar_target("session", &sidecar, tool, "2025-11-25"),
            "--target".into(),
            sidecar_target("sessionless", &sidecar, tool, "2026-07-28"),
            "--target".into(),
            format!("direct-session,{},{tool},2025-11-25", workload.urls[0]),
            "--target".into(),
            format!("direct-sessionless,{},{tool},2026-07-28", workload.urls[0]),
            "--calls".into(),
            CALLS.to_string(),
            "--rounds".into(),
            ROUNDS.to_string(),
        ]);
        let report = tokio::task::block_in_place(|| mcpload_call(&args));
        Revisions {
            call_session_ms: medians(&report, "session").p50,
            call_sessionless_ms: medians(&report, "sessionless").p50,
            direct_session_ms: medians(&report, "direct-session").p50,
            direct_sessionless_ms: medians(&report, "direct-sessionless").p50,
            calls: ROUNDS * CALLS,
            setup: None,
        }
    });
    if workload.calls_only {
        return Figures::calls_only(workload.label, loads, None, revisions);
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
    Figures {
        label: workload.label,
        loads,
        setup_sidecar_ms: report["sidecar"]["setup_p50_ms"].as_f64().unwrap_or(0.0),
        setup_direct_ms: report["direct"]["setup_p50_ms"].as_f64().unwrap_or(0.0),
        rss_per_session_kib: (after - before) / OPEN_SESSIONS as f64,
        routed: None,
        revisions,
    }
}
