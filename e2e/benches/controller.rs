//! Controller benchmark (`make bench`): 5,000 CapabilityBindings, 10% invalid, on a real
//! control plane. For each write mode — `transitions` (the design) and `every-reconcile` (the
//! naive baseline), run alternately, three rounds each — it measures:
//!
//! - the time from controller start until every binding shows Accepted for its current
//!   generation (each round bumps every binding's generation first, so every round has 5,000
//!   statuses to write);
//! - status writes the apiserver recorded (audit log) for that round's controller;
//! - status writes during three forced resyncs with nothing changed (three restarts: each
//!   re-lists and reconciles every binding, as a resync does);
//! - the controller's peak RSS.
//!
//! Then one round with the Composed probe on, against the demo provider: time until every
//! binding shows its Composed verdict, status writes, writes over three unchanged probe
//! rounds, the MCP sessions opened at the provider per probe round, and peak RSS.
//!
//! Reports medians and the ratios between the modes. Nothing here is asserted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capstan_e2e::controller::{ControllerProcess, service_account_kubeconfig};
use capstan_e2e::suite::with_plane;
use capstan_e2e::{ControlPlane, FIELD_MANAGER};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const BINDINGS: usize = 5_000;
const INVALID_EVERY: usize = 10;
const ROUNDS: usize = 3;

struct Round {
    mode: &'static str,
    all_accepted: Duration,
    writes: usize,
    resync_writes: usize,
    peak_rss_mib: f64,
}

fn main() {
    let ((rounds, raws), probe) = with_plane("bench-controller", |plane, runtime| {
        runtime.block_on(async {
            // CAPSTAN_BENCH_PROBE_ONLY=1 runs the probe round alone (the write-mode rounds take
            // ~15 min).
            let rounds = if std::env::var_os("CAPSTAN_BENCH_PROBE_ONLY").is_some() {
                open_crds(plane).await;
                (Vec::new(), Vec::new())
            } else {
                bench(plane).await
            };
            (rounds, probe_round(plane).await)
        })
    });
    println!("<!-- bench:controller -->\n### Controller (`e2e/benches/controller.rs`)\n\n```text");
    report(&rounds, &raws);
    println!("{probe}");
    println!("```\n<!-- /bench:controller -->");
}

/// Seconds between probes in the probe round: 5,000 bindings at 8 at once fit well inside.
const PROBE_INTERVAL_SECONDS: u64 = 60;

/// Bindings showing a Composed verdict (Composed, CompositionDegraded or NotAccepted) for their
/// current generation.
async fn composed_count(api: &Api<DynamicObject>) -> usize {
    let list = api
        .list(&ListParams::default().match_any())
        .await
        .unwrap_or_else(|e| panic!("list: {e}"));
    list.items
        .iter()
        .filter(|object| {
            let generation = object.metadata.generation;
            object.data["status"]["conditions"]
                .as_array()
                .is_some_and(|conditions| {
                    conditions.iter().any(|c| {
                        c["type"] == "Composed"
                            && c["reason"] != "NotProbed"
                            && c["observedGeneration"].as_i64() == generation
                    })
                })
        })
        .count()
}

/// The `initialize` requests the provider received: MCP sessions opened.
async fn sessions_opened(provider: &capstan_demo_provider::harness::DemoProvider) -> usize {
    provider
        .requests()
        .await
        .iter()
        .filter_map(|r| r["rpc"].as_array())
        .flatten()
        .filter(|m| m["method"] == "initialize")
        .count()
}

/// The probe round: every binding's endpoint on a running demo provider, probing on.
async fn probe_round(plane: &ControlPlane) -> String {
    let client = plane.client().await.unwrap_or_else(|e| panic!("{e}"));
    let api: Api<DynamicObject> = Api::all_with(client, &binding_resource());
    let provider = capstan_demo_provider::harness::DemoProvider::start(&[]);
    let endpoint = provider.url("/mcp");
    apply_all(&api, |index| {
        let mut spec = spec(index, 99);
        spec["tools"]["mcpServers"][0]["endpoint"] = json!(endpoint);
        // Each binding its own server name: no binding takes another's tools.
        spec["tools"]["mcpServers"][0]["name"] = json!(format!("s{index}"));
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("skills");
        }
        spec
    })
    .await;
    let identity = "bench-probe";
    let kubeconfig = service_account_kubeconfig(plane, identity).unwrap_or_else(|e| panic!("{e}"));
    let user = format!("system:serviceaccount:capstan-system:{identity}");
    let host = provider.host();
    let interval = PROBE_INTERVAL_SECONDS.to_string();
    let args = [
        "--log",
        "warn",
        "--mcp-endpoint-hosts",
        &host,
        "--probe-interval-seconds",
        &interval,
    ];
    let before = sessions_opened(&provider).await;
    let started = Instant::now();
    let mut controller = ControllerProcess::start(plane, &kubeconfig, identity, &args)
        .unwrap_or_else(|e| panic!("{e}"));
    loop {
        if composed_count(&api).await == BINDINGS {
            break;
        }
        assert!(
            controller.is_running(),
            "the controller exited:\n{}",
            controller.log_text()
        );
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "not all Composed in 15 min"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let all_composed = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = writes_by(plane, &user);
    let first_round_sessions = sessions_opened(&provider).await - before;
    // Three more probe rounds with nothing changing.
    let probes = || controller.metric("capstan_controller_probes_total{");
    let probed = probes();
    let rounds_started = Instant::now();
    let valid = (BINDINGS - BINDINGS / INVALID_EVERY) as f64;
    while probes() < probed + 3.0 * valid {
        assert!(
            rounds_started.elapsed() < Duration::from_secs(20 * PROBE_INTERVAL_SECONDS),
            "three probe rounds did not finish"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let unchanged_writes = writes_by(plane, &user) - writes;
    let sessions = sessions_opened(&provider).await - before;
    let probe_sum = controller.metric("capstan_controller_probe_duration_seconds_sum");
    let probe_count = controller.metric("capstan_controller_probe_duration_seconds_count");
    let peak = controller.peak_rss_mib();
    drop(controller);
    format!(
        "probe round ({BINDINGS} bindings, {}% invalid, demo provider, interval {PROBE_INTERVAL_SECONDS} s, \
         8 at once): all Composed after {all_composed:.2?}, {writes} status writes, \
         {unchanged_writes} during 3 unchanged probe rounds, {first_round_sessions} MCP sessions \
         in the first round ({sessions} over 4 rounds), mean probe {:.1} ms, peak RSS {peak:.1} MiB",
        100 / INVALID_EVERY,
        1000.0 * probe_sum / probe_count.max(1.0)
    )
}

fn binding_resource() -> ApiResource {
    ApiResource::erase::<capstan_api::CapabilityBinding>(&())
}

fn spec(index: usize, round: usize) -> Value {
    let mut spec = json!({
        "serviceRef": { "name": format!("service-{index}") },
        "serviceName": format!("service-{index}.example"),
        "serviceAgentRef": { "name": format!("agent-{index}") },
        "configurationVersion": format!("round-{round}"),
        "tools": { "mcpServers": [{
            "name": "streamco",
            "endpoint": "http://127.0.0.1:7810/mcp",
            "toolSelector": { "include": ["streams_list", "streams_get", "pipeline_diagnose"] }
        }]},
        "skills": [{ "name": "lag-triage", "description": "Triage lag", "source": "http://127.0.0.1:7810/runbooks/lag.md" }]
    });
    if index.is_multiple_of(INVALID_EVERY) {
        spec.as_object_mut().map(|s| s.remove("serviceName"));
    }
    spec
}

/// Applies every binding with the spec `spec_of` gives its index (32 requests in flight).
async fn apply_all(api: &Api<DynamicObject>, spec_of: impl Fn(usize) -> Value) {
    futures::stream::iter(0..BINDINGS)
        .map(|index| {
            let name = format!("bench-{index:05}");
            let object = json!({
                "apiVersion": capstan_api::API_VERSION, "kind": "CapabilityBinding",
                "metadata": { "name": name }, "spec": spec_of(index),
            });
            async move {
                api.patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&object),
                )
                .await
            }
        })
        .buffer_unordered(32)
        .try_for_each(|_| async { Ok(()) })
        .await
        .unwrap_or_else(|e| panic!("applying bindings: {e}"));
}

/// How many bindings show Accepted for their current generation.
async fn accepted_count(api: &Api<DynamicObject>) -> usize {
    // From the apiserver's watch cache: a quorum read of 5,000 objects would compete with the
    // controller for the same two cores.
    let list = api
        .list(&ListParams::default().match_any())
        .await
        .unwrap_or_else(|e| panic!("list: {e}"));
    list.items
        .iter()
        .filter(|object| {
            let generation = object.metadata.generation;
            object.data["status"]["conditions"]
                .as_array()
                .is_some_and(|conditions| {
                    conditions.iter().any(|c| {
                        c["type"] == "Accepted" && c["observedGeneration"].as_i64() == generation
                    })
                })
        })
        .count()
}

/// Successful status writes to bindings by `user`, from the audit log.
fn writes_by(plane: &ControlPlane, user: &str) -> usize {
    plane
        .status_writes("capabilitybindings", |_| true)
        .get(user)
        .copied()
        .unwrap_or(0)
}

/// Waits until a freshly started controller leads, has reconciled every binding and has an
/// empty queue (its /metrics), and then until the audit log shows no new status write by
/// `user` for five seconds. The audit log is what both modes share: the baseline writes from
/// its reconciles, not through the queue.
async fn wait_until_settled(plane: &ControlPlane, controller: &ControllerProcess, user: &str) {
    let started = Instant::now();
    let deadline = || {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "controller did not settle in 10 min"
        );
    };
    loop {
        let leads = controller.metric("capstan_controller_leader ") == 1.0;
        let reconciled =
            controller.metric("capstan_controller_reconciles_total{kind=\"CapabilityBinding\"");
        let queued = controller.metric("capstan_controller_status_queue_depth");
        if leads && reconciled >= BINDINGS as f64 && queued == 0.0 {
            break;
        }
        deadline();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut last = writes_by(plane, user);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = writes_by(plane, user);
        if now == last {
            return;
        }
        last = now;
        deadline();
    }
}

/// Installs the CRDs, the binding CRD with an open spec schema (so invalid bindings reach the
/// controller), and returns an admin client.
async fn open_crds(plane: &ControlPlane) -> kube::Client {
    plane
        .client_with_open_crds()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Concurrencies the raw status-patch baseline tries.
const RAW_CONCURRENCY: [usize; 4] = [1, 8, 32, 128];

/// The apiserver's own limit for what the controller does: a status patch (a new Accepted
/// condition) for every binding, from one kept-alive client with `RAW_CONCURRENCY` requests in
/// flight; the best (time, concurrency).
async fn raw_status_patches(api: &Api<DynamicObject>, round: usize) -> (Duration, usize) {
    let mut best: Option<(Duration, usize)> = None;
    for concurrency in RAW_CONCURRENCY {
        let started = Instant::now();
        futures::stream::iter(0..BINDINGS)
            .map(|index| {
                let name = format!("bench-{index:05}");
                let status = json!({ "status": { "conditions": [{
                    "type": "Accepted", "status": "True", "reason": "Raw",
                    "message": format!("raw patch, round {round}, {concurrency} in flight"),
                    "observedGeneration": 0, "lastTransitionTime": "2026-01-01T00:00:00Z"
                }]}});
                async move {
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await
                }
            })
            .buffer_unordered(concurrency)
            .try_for_each(|_| async { Ok(()) })
            .await
            .unwrap_or_else(|e| panic!("raw status patches: {e}"));
        let took = started.elapsed();
        eprintln!(
            "round {round}: {BINDINGS} raw status patches, {concurrency} in flight: {took:.2?}"
        );
        if best.is_none_or(|(b, _)| took < b) {
            best = Some((took, concurrency));
        }
    }
    best.unwrap_or_default()
}

async fn bench(plane: &ControlPlane) -> (Vec<Round>, Vec<(Duration, usize)>) {
    let client = open_crds(plane).await;
    let api: Api<DynamicObject> = Api::all_with(client, &binding_resource());

    let created = Instant::now();
    apply_all(&api, |index| spec(index, 0)).await;
    eprintln!("created {BINDINGS} bindings in {:.1?}", created.elapsed());
    // One list before the clock starts: the first list of the bindings after they were
    // created has been seen to take ~95 s on this apiserver (the first round's controller
    // stalled on its own initial list for as long), which is not the controller's time.
    let warm = Instant::now();
    let accepted = accepted_count(&api).await;
    eprintln!(
        "first list of all bindings took {:.1?} ({accepted} accepted)",
        warm.elapsed()
    );

    let mut rounds = Vec::new();
    let mut raws = Vec::new();
    for round in 1..=ROUNDS {
        raws.push(raw_status_patches(&api, round).await);
        for (mode, flag) in [
            ("transitions", "transitions"),
            ("every-reconcile", "every-reconcile"),
        ] {
            // A new generation for every binding: this round's controller has 5,000 to write.
            let generation = round * 10 + rounds.len();
            apply_all(&api, |index| spec(index, generation)).await;
            let identity = format!("bench-{mode}-{round}");
            let kubeconfig =
                service_account_kubeconfig(plane, &identity).unwrap_or_else(|e| panic!("{e}"));
            let user = format!("system:serviceaccount:capstan-system:{identity}");

            let started = Instant::now();
            // Probing off: these rounds measure Accepted writes (the probe has its own round).
            let args = [
                "--write-mode",
                flag,
                "--log",
                "warn",
                "--probe-interval-seconds",
                "0",
            ];
            let mut controller = ControllerProcess::start(plane, &kubeconfig, &identity, &args)
                .unwrap_or_else(|e| panic!("{e}"));
            let mut progress = Vec::new();
            loop {
                let accepted = accepted_count(&api).await;
                progress.push((started.elapsed().as_secs(), accepted));
                if accepted == BINDINGS {
                    break;
                }
                assert!(
                    controller.is_running(),
                    "{mode}: the controller exited:\n{}",
                    controller.log_text()
                );
                assert!(
                    started.elapsed() < Duration::from_secs(600),
                    "{mode}: not all accepted in 10 min"
                );
                // Coarse on purpose: each poll lists every binding.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let all_accepted = started.elapsed();
            // Let in-flight writes land before counting.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let writes = writes_by(plane, &user);
            let peak = controller.peak_rss_mib();
            // Where the time went: the queue worker's write latency (transitions mode only),
            // and how many bindings were Accepted every 10 s.
            let write_count =
                controller.metric("capstan_controller_status_write_duration_seconds_count");
            let write_sum =
                controller.metric("capstan_controller_status_write_duration_seconds_sum");
            if write_count > 0.0 {
                eprintln!(
                    "round {round} {mode}: {write_count} queued writes, mean {:.1} ms, {:.1} s writing",
                    1000.0 * write_sum / write_count,
                    write_sum
                );
            }
            progress.dedup_by_key(|(secs, _)| *secs / 10);
            let timeline: Vec<String> = progress
                .iter()
                .map(|(secs, accepted)| format!("{secs}s:{accepted}"))
                .collect();
            eprintln!(
                "round {round} {mode}: accepted over time {}",
                timeline.join(" ")
            );
            drop(controller);

            // Three forced resyncs with nothing changed: a restart re-lists and reconciles
            // every binding, which is what a resync does, without waiting out a period.
            for _ in 0..3 {
                let controller = ControllerProcess::start(plane, &kubeconfig, &identity, &args)
                    .unwrap_or_else(|e| panic!("{e}"));
                wait_until_settled(plane, &controller, &user).await;
                drop(controller);
            }
            let resync_writes = writes_by(plane, &user) - writes;
            eprintln!(
                "round {round} {mode}: all accepted after {all_accepted:.2?}, {writes} writes, \
                 {resync_writes} during 3 resyncs, peak RSS {peak:.1} MiB"
            );
            rounds.push(Round {
                mode,
                all_accepted,
                writes,
                resync_writes,
                peak_rss_mib: peak,
            });
        }
    }
    (rounds, raws)
}

fn median<T: PartialOrd + Copy>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}

fn report(rounds: &[Round], raws: &[(Duration, usize)]) {
    if rounds.is_empty() {
        return;
    }
    println!(
        "\ncapstan-controller: {BINDINGS} bindings ({}% invalid), medians of {ROUNDS} rounds, modes alternated",
        100 / INVALID_EVERY
    );
    println!(
        "{:<16} {:>16} {:>14} {:>22} {:>14}",
        "mode", "all Accepted", "status writes", "writes in 3 resyncs", "peak RSS"
    );
    let mut medians = BTreeMap::new();
    for mode in ["transitions", "every-reconcile"] {
        let of = |f: &dyn Fn(&Round) -> f64| {
            median(rounds.iter().filter(|r| r.mode == mode).map(f).collect())
        };
        let row = (
            of(&|r| r.all_accepted.as_secs_f64()),
            of(&|r| r.writes as f64),
            of(&|r| r.resync_writes as f64),
            of(&|r| r.peak_rss_mib),
        );
        println!(
            "{mode:<16} {:>14.2} s {:>14} {:>22} {:>10.1} MiB",
            row.0, row.1, row.2, row.3
        );
        medians.insert(mode, row);
    }
    if let (Some(t), Some(e)) = (medians.get("transitions"), medians.get("every-reconcile")) {
        println!(
            "ratio transitions/every-reconcile: time {:.2}x, writes {:.2}x, resync writes {} vs {}, RSS {:.2}x",
            t.0 / e.0,
            t.1 / e.1.max(1.0),
            t.2,
            e.2,
            t.3 / e.3.max(f64::MIN_POSITIVE)
        );
    }
    if let (Some(t), false) = (medians.get("transitions"), raws.is_empty()) {
        let best = median(raws.iter().map(|(d, _)| d.as_secs_f64()).collect());
        let concurrencies: Vec<String> = raws.iter().map(|(_, c)| c.to_string()).collect();
        println!(
            "the apiserver's own limit: {BINDINGS} raw status patches at the best of {RAW_CONCURRENCY:?} in flight \
             (best per round: {} in flight), median {best:.2} s; all Accepted / raw: {:.2}x (goal <= 1.3x)",
            concurrencies.join(", "),
            t.0 / best
        );
    }
}
