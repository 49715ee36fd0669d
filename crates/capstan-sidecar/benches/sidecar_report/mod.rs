//! The sidecar bench's report (`docs/benchmarks.md`, section `sidecar`): the same tables for
//! each harness — the rmcp client and the independent one — from the last run, then the goals
//! of issue 60 for every run and harness, with the worst of the runs.

use super::*;

/// The figures as a markdown section: the last run's tables, and the goals of issue 60 for every
/// run with the worst of them.
pub fn report(runs: &[Run], many: Option<&sidecar_many::Many>) {
    let last = runs.last().expect("at least one run");
    let mut out = String::new();
    out.push_str("<!-- bench:sidecar -->\n");
    out.push_str(&format!(
        "### Sidecar (`crates/capstan-sidecar/benches/sidecar.rs`)\n\n\
         `tools/call` through the sidecar (Unix socket) against the same rmcp client calling the \
         upstream directly (TCP loopback); 3 upstreams of the kind behind the sidecar, calls to \
         the first; metering on (to a file). Medians of {ROUNDS} rounds, direct and sidecar \
         alternated round by round. CPU per call: the process's CPU time over all rounds of \
         that side (the scheduler's per-thread accounting, to the nanosecond) divided by its \
         calls (the client's: this benchmark's own process). The \
         minimal upstream answers JSON, so the client parses the same response mode on both \
         sides; \"SSE answers\" is the same server with sessions, answering each call as an SSE \
         stream that the sidecar turns into JSON (what that costs the client: \
         `docs/performance.md`).\n\n"
    ));
    harness_tables(&mut out, &last.figures);
    out.push_str(
        "\n#### The same from an independent client\n\n\
         `mcpload` (the official Go MCP SDK, `e2e/tools/mcpload`) against the same upstreams, in \
         one client process alternating the targets round by round; its own CPU per call is the \
         client's column. Cold sessions: connect, initialize, `tools/list` and close.\n\n",
    );
    harness_tables(&mut out, &last.independent);
    if let Some(pinned) = &last.pinned {
        pinned_table(&mut out, pinned);
    }
    if let Some(head_of_line) = &last.head_of_line {
        sidecar_head_of_line::report_head_of_line(&mut out, head_of_line);
    }
    if let Some(many) = many {
        sidecar_many::report_many(&mut out, many);
    }
    goals(&mut out, runs);
    out.push_str("<!-- /bench:sidecar -->\n");
    println!("\n{out}");
}

/// One harness's tables: calls both ways, the floor under any proxy, cold sessions and memory,
/// the revisions, routing.
fn harness_tables(out: &mut String, figures: &[Figures]) {
    out.push_str(
        "| workload | load | calls/round | direct p50 | p99 | calls/s | sidecar p50 | p99 | calls/s | p50 ratio | throughput ratio | sidecar CPU/call | upstream CPU/call (direct, via sidecar) | client CPU/call (direct, via sidecar) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for f in figures {
        for l in &f.loads {
            out.push_str(&format!(
                "| {} | {} | {} | {:.3} ms | {:.3} ms | {:.0} | {:.3} ms | {:.3} ms | {:.0} | {:.2}× | {:.2}× | {:.0} µs | {:.0} µs, {:.0} µs | {:.0} µs, {:.0} µs |\n",
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
                l.sidecar_cpu_us,
                l.upstream_cpu_us_direct,
                l.upstream_cpu_us_sidecar,
                l.client_cpu_us.0,
                l.client_cpu_us.1,
            ));
        }
    }
    out.push_str(
        "\nThe floor under any proxy: the same client through `tcp-hop` (one extra TCP hop that \
         copies bytes unread) to the same upstream, in the same rounds.\n\n\
         | workload | load | hop p50 | hop calls/s | hop / direct p50 | sidecar / hop p50 | hop / direct throughput | hop CPU/call |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for f in figures {
        for l in &f.loads {
            if let Some((hop, cpu)) = &l.hop {
                out.push_str(&format!(
                    "| {} | {} | {:.3} ms | {:.0} | {:.2}× | {:.2}× | {:.2}× | {cpu:.0} µs |\n",
                    f.label,
                    l.label,
                    hop.p50,
                    hop.throughput,
                    hop.p50 / l.direct.p50,
                    l.sidecar.p50 / hop.p50,
                    hop.throughput / l.direct.throughput,
                ));
            }
        }
    }
    out.push_str(&format!(
        "\n| workload | cold session, 3 upstreams | direct initialize + tools/list, 1 upstream | ratio | RSS per open session ({OPEN_SESSIONS} open) |\n|---|---|---|---|---|\n"
    ));
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
        if let Some(r) = &f.revisions {
            out.push_str(&format!(
                "\n2026-07-28 beside the session revisions ({}): `tools/call` p50 {:.3} ms without a session against {:.3} ms in a 2025-11-25 session, {} calls each alternated: {:.2}×",
                f.label,
                r.call_sessionless_ms,
                r.call_session_ms,
                r.calls,
                r.through(),
            ));
            out.push_str(&format!(
                "; the same client to the upstream directly, in the same rounds: {:.3} ms against {:.3} ms, {:.2}× — the sidecar's own share of the difference {:.2}×",
                r.direct_sessionless_ms,
                r.direct_session_ms,
                r.direct(),
                r.sidecar_share(),
            ));
            if let Some((initialize, discover)) = r.setup {
                out.push_str(&format!(
                    "; a new caller's first request (composing its task) `server/discover` {discover:.2} ms against `initialize` {initialize:.2} ms: {:.2}×",
                    discover / initialize,
                ));
            }
            out.push_str(".\n");
        }
    }
    for f in figures {
        if let Some((routed, named, calls)) = f.routed {
            out.push_str(&format!(
                "\nRouted ({}): `cap__web_search` (2 candidates: arguments, merge, selection, forward) p50 {routed:.3} ms against `one__docs_search` (the same provider tool by name) p50 {named:.3} ms, {calls} calls each alternated: {:.3}×.\n",
                f.label,
                routed / named
            ));
        }
    }
}

/// The pinned call rounds (`sidecar_pinned/mod.rs`) of both clients, beside the hop's.
fn pinned_table(out: &mut String, pinned: &sidecar_pinned::Pinned) {
    out.push_str(
        "\n#### The proxies on a core of their own\n\n\
         The minimal upstream's call rounds again, with the sidecar and `tcp-hop` pinned to one \
         core and the client, the upstreams (and `mcpload`) to the other (`taskset`): the \
         sidecar's cost beside the hop's without the three processes contending for two CPUs.\n\n\
         | client | load | direct p50 | hop p50 | sidecar p50 | sidecar / hop p50 | hop calls/s | sidecar calls/s | hop CPU/call | sidecar CPU/call | sidecar / hop CPU |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let clients = [
        (sidecar_tracing::CLIENTS[0], &pinned.rmcp),
        (sidecar_tracing::CLIENTS[1], &pinned.independent),
    ];
    for (client, figures) in clients {
        for l in &figures.loads {
            let Some((hop, hop_cpu)) = &l.hop else {
                continue;
            };
            out.push_str(&format!(
                "| {client} | {} | {:.3} ms | {:.3} ms | {:.3} ms | {:.2}× | {:.0} | {:.0} | {hop_cpu:.0} µs | {:.0} µs | {:.2}× |\n",
                l.label,
                l.direct.p50,
                hop.p50,
                l.sidecar.p50,
                l.sidecar.p50 / hop.p50,
                hop.throughput,
                l.sidecar.throughput,
                l.sidecar_cpu_us,
                l.sidecar_cpu_us / hop_cpu.max(f64::MIN_POSITIVE),
            ));
        }
    }
}

/// Sidecar CPU per call over the hop's at `load` (32 sessions for the goal) in `figures`.
fn cpu_over_hop(figures: &[Figures], at: &str) -> Option<f64> {
    load(figures, MINIMAL, at).and_then(|l| {
        l.hop
            .as_ref()
            .map(|(_, hop_cpu)| l.sidecar_cpu_us / hop_cpu.max(f64::MIN_POSITIVE))
    })
}

/// Sidecar p50 over the hop's at one session in `figures`.
fn p50_over_hop(figures: &[Figures]) -> Option<f64> {
    load(figures, MINIMAL, "1 session")
        .and_then(|l| l.hop.as_ref().map(|(hop, _)| l.sidecar.p50 / hop.p50))
}

/// A goal of issue 60: what it measures in one harness's figures of a run, and whether lower is
/// better.
struct Goal {
    name: &'static str,
    goal: &'static str,
    limit: f64,
    lower_is_better: bool,
    value: fn(&Run, &Harness) -> Option<f64>,
}

fn load<'a>(figures: &'a [Figures], workload: &str, load: &str) -> Option<&'a Load> {
    figures
        .iter()
        .filter(|f| f.label == workload)
        .flat_map(|f| f.loads.iter())
        .find(|l| l.label == load)
}

const MINIMAL: &str = "minimal upstream";
const DEMO: &str = "demo provider";

/// Sidecar CPU per call with tracing in `mode` over tracing off, at `load`, in `harness`.
fn traced(run: &Run, harness: &Harness, load: &str, mode: &str) -> Option<f64> {
    run.tracing.as_ref()?.cpu_ratio(harness.client, load, mode)
}

const GOALS: &[Goal] = &[
    Goal {
        name: "sidecar CPU per forwarded call / the bare TCP hop's, 32 sessions",
        goal: "≤ 1.5×",
        limit: 1.5,
        lower_is_better: true,
        value: |r, h| cpu_over_hop((h.figures)(r), "32 sessions"),
    },
    Goal {
        name: "1-session p50 / the bare TCP hop's",
        goal: "≤ 1.15×",
        limit: 1.15,
        lower_is_better: true,
        value: |r, h| p50_over_hop((h.figures)(r)),
    },
    Goal {
        name: "the same CPU ratio, the proxies pinned to a core of their own",
        goal: "≤ 1.5×",
        limit: 1.5,
        lower_is_better: true,
        value: |r, h| cpu_over_hop(std::slice::from_ref((h.pinned)(r)?), "32 sessions"),
    },
    Goal {
        name: "the same p50 ratio, the proxies pinned to a core of their own",
        goal: "≤ 1.15×",
        limit: 1.15,
        lower_is_better: true,
        value: |r, h| p50_over_hop(std::slice::from_ref((h.pinned)(r)?)),
    },
    Goal {
        name: "sidecar CPU per call, traces sampled at 1 % / off, 1 session",
        goal: "≤ 1.03×",
        limit: 1.03,
        lower_is_better: true,
        value: |r, h| traced(r, h, "1 session", "on, 1 %"),
    },
    Goal {
        name: "sidecar CPU per call, traces sampled at 1 % / off, 32 sessions",
        goal: "≤ 1.03×",
        limit: 1.03,
        lower_is_better: true,
        value: |r, h| traced(r, h, "32 sessions", "on, 1 %"),
    },
    Goal {
        name: "sidecar CPU per call, parent-based sampler, unsampled parent / off, 1 session",
        goal: "≤ 1.01×",
        limit: 1.01,
        lower_is_better: true,
        value: |r, h| traced(r, h, "1 session", "on, parent-based, unsampled parent"),
    },
    Goal {
        name: "sidecar CPU per call, parent-based sampler, unsampled parent / off, 32 sessions",
        goal: "≤ 1.01×",
        limit: 1.01,
        lower_is_better: true,
        value: |r, h| traced(r, h, "32 sessions", "on, parent-based, unsampled parent"),
    },
    Goal {
        name: "small calls' p99 beside a session sending 4 MiB bodies and one reading a slow answer / alone",
        goal: "≤ 1.10×",
        limit: 1.10,
        lower_is_better: true,
        value: |r, h| (h.head_of_line)(r).map(sidecar_head_of_line::Sides::p99_rise),
    },
    Goal {
        name: "RSS per open session, 3 demo upstreams (1,000 open)",
        goal: "≤ 64 KiB",
        limit: 64.0,
        lower_is_better: true,
        value: |r, h| {
            (h.figures)(r)
                .iter()
                .find(|f| f.label == DEMO)
                .map(|f| f.rss_per_session_kib)
        },
    },
];

/// A harness: its name (as the tracing rounds name their client) and its figures in a run.
struct Harness {
    client: &'static str,
    figures: fn(&Run) -> &[Figures],
    /// Its pinned call rounds, where measured.
    pinned: fn(&Run) -> Option<&Figures>,
    /// Its head-of-line round, where measured.
    head_of_line: fn(&Run) -> Option<&sidecar_head_of_line::Sides>,
}

/// The harnesses every goal is judged in.
const HARNESSES: [Harness; 2] = [
    Harness {
        client: sidecar_tracing::CLIENTS[0],
        figures: |r| &r.figures,
        pinned: |r| r.pinned.as_ref().map(|p| &p.rmcp),
        head_of_line: |r| r.head_of_line.as_ref().map(|h| &h.rmcp),
    },
    Harness {
        client: sidecar_tracing::CLIENTS[1],
        figures: |r| &r.independent,
        pinned: |r| r.pinned.as_ref().map(|p| &p.independent),
        head_of_line: |r| r.head_of_line.as_ref().map(|h| &h.independent),
    },
];

/// The goals table: each run's value and the worst of them, per harness.
fn goals(out: &mut String, runs: &[Run]) {
    let heads: String = (1..=runs.len()).map(|n| format!(" run {n} |")).collect();
    let rules: String = runs.iter().map(|_| "---|").collect();
    out.push_str(&format!(
        "\n#### Goals (issue 60; minimal upstream unless named)\n\n| figure | goal |{heads} worst | met |\n|---|---|{rules}---|---|\n"
    ));
    for goal in GOALS {
        for harness in &HARNESSES {
            let values: Vec<Option<f64>> =
                runs.iter().map(|run| (goal.value)(run, harness)).collect();
            let shown: String = values
                .iter()
                .map(|v| v.map_or(" – |".to_owned(), |v| format!(" {v:.2} |")))
                .collect();
            let measured = values.iter().flatten().copied();
            let worst = if goal.lower_is_better {
                measured.reduce(f64::max)
            } else {
                measured.reduce(f64::min)
            };
            let (worst, met) = worst.map_or(("not measured".to_owned(), "—"), |w| {
                let met = if goal.lower_is_better {
                    w <= goal.limit
                } else {
                    w >= goal.limit
                };
                (format!("{w:.2}"), if met { "yes" } else { "no" })
            });
            out.push_str(&format!(
                "| {}, {} | {} |{shown} {worst} | {met} |\n",
                goal.name, harness.client, goal.goal
            ));
        }
    }
}
