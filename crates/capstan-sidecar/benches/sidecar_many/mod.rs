//! The many-sessions round (issue 34): `MANY_SESSIONS` sessions held open on one sidecar by the
//! independent client (`mcpload open`, the official Go MCP SDK: each session its `initialize`
//! and its standalone GET stream), 3 upstreams behind each. Figures: what the sidecar's RSS
//! grew by per session, how fast one client opened them one after another, the sockets the
//! sidecar held, and a call's p50 through the sidecar with them open against the same calls
//! before — each beside the same client's direct call in the same rounds, so that a slower
//! machine moment shows on both sides.
//!
//! Descriptors: each session's GET stream holds a connection in the client and in the sidecar
//! (the first 10,000-session run: 10,027 in the sidecar), so the round fits under a 20,000
//! limit; where more are needed (an upstream that keeps a stream per session), the sidecar and
//! the upstreams are given a raised `RLIMIT_NOFILE` with `prlimit` where that is allowed
//! (CAP_SYS_RESOURCE), and the round opens only as many as fit under the limit the sidecar has,
//! by what a session held so far, and says so.

use capstan_testkit::{OpenSessions, mcpload_call};

use super::sidecar_independent::{common_args, medians, sidecar_target};
use super::*;

/// Sessions held open.
pub const MANY_SESSIONS: usize = 10_000;

/// The descriptor limit asked for the sidecar and the upstreams: two per session in the
/// sidecar, one more per upstream session that keeps a stream, and room to spare.
const NOFILE: usize = 4 * MANY_SESSIONS + 4_096;

/// What the round measured.
pub struct Many {
    pub label: &'static str,
    pub sessions: usize,
    /// Seconds the clients took to open them, one after another.
    pub open_seconds: f64,
    /// Sessions a second, per thousand opened.
    pub chunks: Vec<f64>,
    pub rss_before_mib: f64,
    pub rss_open_mib: f64,
    /// Descriptors the sidecar held with them open.
    pub sidecar_fds: usize,
    /// A call's p50 in ms (sidecar, direct), 1 session, before and with them open.
    pub idle: (f64, f64),
    pub open: (f64, f64),
}

impl Many {
    pub fn rss_per_session_kib(&self) -> f64 {
        (self.rss_open_mib - self.rss_before_mib) * 1024.0 / self.sessions as f64
    }

    pub fn open_rate(&self) -> f64 {
        self.sessions as f64 / self.open_seconds
    }
}

/// Raises `pid`'s descriptor limit to `NOFILE`; whether it could.
fn raise_nofile(pid: u32) -> bool {
    std::process::Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={NOFILE}:{NOFILE}"),
        ])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The descriptor limit `pid` runs with (its soft limit).
fn nofile(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()
        .and_then(|limits| {
            limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Sessions opened by one client process in one go.
const CHUNK: usize = 1_000;

/// `mcpload open` of `sessions` on the sidecar.
fn open_args(workload: &Workload, sidecar: &Sidecar, sessions: usize) -> Vec<String> {
    let mut args = common_args(workload);
    args.extend([
        "--target".into(),
        sidecar_target("sidecar", sidecar, workload.tool, "2025-11-25"),
        "--sessions".into(),
        sessions.to_string(),
    ]);
    args
}

/// One call round of 1 session through the sidecar and directly, alternated: the p50s (ms).
fn call_p50s(workload: &Workload, sidecar: &Sidecar) -> (f64, f64) {
    let mut args = common_args(workload);
    args.extend([
        "--target".into(),
        format!("direct,{},{},2025-11-25", workload.urls[0], workload.tool),
        "--target".into(),
        sidecar_target("sidecar", sidecar, workload.tool, "2025-11-25"),
        "--sessions".into(),
        "1".into(),
        "--calls".into(),
        CALLS.to_string(),
        "--rounds".into(),
        ROUNDS.to_string(),
    ]);
    let report = tokio::task::block_in_place(|| mcpload_call(&args));
    (
        medians(&report, "sidecar").p50,
        medians(&report, "direct").p50,
    )
}

/// The round on `workload`, on a sidecar of its own with its session caps raised for it.
pub async fn many(workload: &Workload) -> Many {
    // A session and its GET stream take a place each under the caps.
    let cap = (2 * MANY_SESSIONS + 64).to_string();
    let sidecar = Sidecar::start(
        &documents(workload),
        &workload.hosts,
        &[
            ("CAPSTAN_MAX_SESSIONS", &cap),
            ("CAPSTAN_MAX_SESSIONS_PER_CALLER", &cap),
            ("CAPSTAN_MAX_SESSIONS_PER_PROJECT", &cap),
        ],
    );
    let raised = [sidecar.pid()]
        .iter()
        .chain(&workload.pids)
        .all(|&pid| raise_nofile(pid));
    let idle = call_p50s(workload, &sidecar);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before_mib = rss_kib(sidecar.pid()) / 1024.0;
    let fds_before = open_fds(sidecar.pid());
    let started = Instant::now();
    let open = |sessions| {
        let args = open_args(workload, &sidecar, sessions);
        tokio::task::block_in_place(|| OpenSessions::open(&args))
    };
    // Opened a thousand at a time, each by a client of its own, so that the rate with many
    // open shows beside the first thousand's; after the first, only as many as fit under the
    // descriptor limit (with a tenth to spare) by what one session held so far.
    let (mut held, mut chunks) = (Vec::new(), Vec::new());
    let mut sessions = 0;
    let mut per_session = 1.0;
    while sessions < MANY_SESSIONS {
        let room = nofile(sidecar.pid()).saturating_sub(open_fds(sidecar.pid()) + 512);
        let chunk = CHUNK
            .min(MANY_SESSIONS - sessions)
            .min((room as f64 / (per_session * 1.1)) as usize);
        if chunk == 0 {
            eprintln!(
                "many sessions: only {sessions} fit under the sidecar's RLIMIT_NOFILE of {} \
                 ({per_session:.1} descriptors a session; prlimit raised it: {raised})",
                nofile(sidecar.pid())
            );
            break;
        }
        let chunk_started = Instant::now();
        held.push(open(chunk));
        chunks.push(chunk as f64 / chunk_started.elapsed().as_secs_f64());
        sessions += chunk;
        per_session =
            (open_fds(sidecar.pid()).saturating_sub(fds_before) as f64 / sessions as f64).max(1.0);
    }
    let open_seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_open_mib = rss_kib(sidecar.pid()) / 1024.0;
    let sidecar_fds = open_fds(sidecar.pid());
    let open = call_p50s(workload, &sidecar);
    drop(held);
    Many {
        label: workload.label,
        sessions,
        open_seconds,
        chunks,
        rss_before_mib,
        rss_open_mib,
        sidecar_fds,
        idle,
        open,
    }
}

/// The round's lines for the report.
pub fn report_many(out: &mut String, many: &Many) {
    out.push_str(&format!(
        "\n#### {} sessions open on one sidecar ({}, 3 upstreams each; independent client)\n\n\
         `mcpload open` holds them (each its `initialize` and GET stream), opened one after \
         another by one client; a call's p50 is 1 session, {ROUNDS} rounds of {CALLS} calls, \
         sidecar and direct alternated.\n\n\
         | figure | value |\n|---|---|\n\
         | opened in | {:.1} s ({:.0} sessions/s) |\n\
         | sessions/s per {CHUNK} opened | {} |\n\
         | sidecar RSS before / with them open | {:.1} / {:.1} MiB ({:.1} KiB per session) |\n\
         | descriptors the sidecar held | {} |\n\
         | call p50 before, sidecar / direct | {:.3} / {:.3} ms ({:.2}×) |\n\
         | call p50 with them open, sidecar / direct | {:.3} / {:.3} ms ({:.2}×) |\n",
        many.sessions,
        many.label,
        many.open_seconds,
        many.open_rate(),
        many.chunks
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        many.rss_before_mib,
        many.rss_open_mib,
        many.rss_per_session_kib(),
        many.sidecar_fds,
        many.idle.0,
        many.idle.1,
        many.idle.0 / many.idle.1,
        many.open.0,
        many.open.1,
        many.open.0 / many.open.1,
    ));
}
